-- Argo CD health of a p4fleet P4Program (API group p4fleet.dev).
-- Healthy only when the operator has seen the current spec (observedGeneration
-- = metadata.generation) and says Ready=True; Progressing while it has not
-- reported yet or has not caught up with the spec;
-- Degraded with the Ready condition's message otherwise. A valid program
-- with a rollout (status.rollout) is Progressing while it rolls out,
-- Suspended while paused, Degraded once rolled back, Healthy when done.
-- A changed content held by spec.plan (Planned=True) is Suspended.
-- Argo CD runs health scripts with the base and table libraries only.
local hs = {}

local function find(conditions, wanted)
  for _, c in ipairs(conditions) do
    if c.type == wanted then
      return c
    end
  end
  return nil
end

local gen = obj.metadata.generation
local st = obj.status
if st == nil or st.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the p4fleet operator to report status"
  return hs
end
if gen ~= nil and st.observedGeneration ~= gen then
  hs.status = "Progressing"
  hs.message = "Waiting for the p4fleet operator to observe generation " .. gen
  return hs
end
local ready = find(st.conditions, "Ready")
if ready == nil or (gen ~= nil and ready.observedGeneration ~= nil and ready.observedGeneration ~= gen) then
  hs.status = "Progressing"
  hs.message = "Waiting for the Ready condition of generation " .. (gen or "?")
  return hs
end
local message = ready.message
if message == nil or message == "" then
  message = ready.reason or ""
end
local planned = find(st.conditions, "Planned")
if ready.status == "True" and planned ~= nil and planned.status == "True" then
  hs.status = "Suspended"
  hs.message = planned.message
  return hs
end
local r = st.rollout
if ready.status == "True" and r ~= nil and r.to ~= nil then
  local to = "revision " .. tostring(r.to.revision)
  local counts = tostring(r.updated or 0) .. " updated, " .. tostring(r.healthy or 0) ..
    " healthy, " .. tostring(r.pending or 0) .. " pending"
  if r.phase == "Progressing" then
    hs.status = "Progressing"
    hs.message = "Rolling out " .. to .. ", step " .. tostring(r.step or 0) .. ": " .. counts
    return hs
  elseif r.phase == "Paused" then
    hs.status = "Suspended"
    hs.message = "Rollout of " .. to .. " paused at step " .. tostring(r.step or 0) .. ": " .. counts
    return hs
  elseif r.phase == "RolledBack" then
    hs.status = "Degraded"
    local f = r.failure
    if f ~= nil then
      hs.message = to .. " rolled back: " .. (f.check or "?") .. " failed on VirtualSwitch " ..
        (f.virtualSwitch or "?") .. ": " .. (f.message or "")
    else
      hs.message = to .. " rolled back"
    end
    return hs
  end
end
if ready.status == "True" then
  hs.status = "Healthy"
  hs.message = message
elseif ready.status == "False" then
  hs.status = "Degraded"
  hs.message = message
else
  hs.status = "Progressing"
  hs.message = message
end
return hs
