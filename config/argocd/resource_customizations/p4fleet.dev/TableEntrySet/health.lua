-- Argo CD health of a p4fleet TableEntrySet (API group p4fleet.dev).
-- Healthy only when the operator has seen the current spec (observedGeneration
-- = metadata.generation) and says Ready=True; Progressing while it has not
-- reported yet or has not caught up with the spec, or while it waits for its VirtualSwitches;
-- Suspended while it only plans (spec.plan: Ready=False, reason PlanOnly);
-- Degraded with the Ready condition's message otherwise. A Ready set with a
-- Canary rollout of its entries (status.rollout) is Progressing while it
-- rolls out, Suspended while paused, Degraded once rolled back.
-- Argo CD runs health scripts with the base and table libraries only.
local hs = {}
-- Ready=False reasons that mean waiting for another object, not a fault.
local waiting = {
  NoTarget = true, -- no VirtualSwitch resolved yet
  VirtualSwitchNotScheduled = true, -- the VirtualSwitch has no slot yet
  VirtualSwitchNotReady = true, -- its pipeline is not loaded yet
}

-- "(applied/desired entries applied)" when the operator reported counts.
local function progress(st, message)
  if st.desired ~= nil and st.applied ~= nil then
    return message .. " (" .. st.applied .. "/" .. st.desired .. " entries applied)"
  end
  return message
end

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
local r = st.rollout
if ready.status == "True" and r ~= nil and r.to ~= nil then
  local to = "entries revision " .. tostring(r.to.revision)
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
elseif ready.status == "False" and ready.reason == "PlanOnly" then
  hs.status = "Suspended"
  hs.message = message
elseif ready.status == "False" and not waiting[ready.reason or ""] then
  hs.status = "Degraded"
  hs.message = message
else
  hs.status = "Progressing"
  hs.message = progress(st, message)
end
return hs
