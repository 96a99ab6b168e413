//! Argo CD health checks (config/argocd/resource_customizations/p4fleet.dev/
//! <Kind>/health.lua) run the way Argo CD runs them: a Lua 5.1 interpreter
//! with only the base and table libraries, the object as global `obj`, the
//! returned table read as `{status, message}`. Every case of each kind's
//! health_test.yaml must give its expected status and message; the testdata
//! objects must be valid p4fleet resources; the argocd-cm patch must carry
//! the scripts verbatim.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use mlua::{Lua, LuaOptions, StdLib, Value as LuaValue};
use p4fleet_e2e::{json_subset_mismatch, repo_root};
use serde::Deserialize;
use serde_json::Value;

const CUSTOMIZATIONS: &str = "config/argocd/resource_customizations/p4fleet.dev";
const ARGOCD_CM_PATCH: &str = "config/argocd/argocd-cm-health.yaml";
/// Health status codes Argo CD accepts from a script (anything else becomes
/// Unknown with an error message).
const ARGO_STATUSES: [&str; 6] = [
    "Unknown",
    "Progressing",
    "Suspended",
    "Healthy",
    "Degraded",
    "Missing",
];

#[derive(Debug, Deserialize)]
struct HealthTests {
    tests: Vec<HealthTest>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct HealthTest {
    input_path: String,
    health_status: HealthStatus,
}

#[derive(Debug, Deserialize, PartialEq, Eq, Default)]
struct HealthStatus {
    #[serde(default)]
    status: String,
    #[serde(default)]
    message: String,
}

fn kinds() -> Vec<String> {
    p4fleet_crds::all()
        .into_iter()
        .map(|c| c.spec.names.kind)
        .collect()
}

fn kind_dir(kind: &str) -> PathBuf {
    repo_root().join(CUSTOMIZATIONS).join(kind)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn load_tests(kind: &str) -> Vec<HealthTest> {
    let path = kind_dir(kind).join("health_test.yaml");
    let tests: HealthTests =
        serde_yaml::from_str(&read(&path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    tests.tests
}

fn load_object(kind: &str, input: &str) -> Value {
    let path = kind_dir(kind).join(input);
    serde_yaml::from_str(&read(&path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// JSON to Lua as Argo CD converts unstructured objects: maps and arrays
/// become tables (arrays 1-based), numbers are floats, null is nil.
fn to_lua(lua: &Lua, v: &Value) -> mlua::Result<LuaValue> {
    Ok(match v {
        Value::Null => LuaValue::Nil,
        Value::Bool(b) => LuaValue::Boolean(*b),
        Value::Number(n) => LuaValue::Number(n.as_f64().unwrap_or(f64::NAN)),
        Value::String(s) => LuaValue::String(lua.create_string(s)?),
        Value::Array(items) => {
            let t = lua.create_table()?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, to_lua(lua, item)?)?;
            }
            LuaValue::Table(t)
        }
        Value::Object(map) => {
            let t = lua.create_table()?;
            for (k, item) in map {
                t.raw_set(k.as_str(), to_lua(lua, item)?)?;
            }
            LuaValue::Table(t)
        }
    })
}

/// Runs `script` on `obj` as Argo CD's health check does.
fn run_health(script: &str, name: &str, obj: &Value) -> Result<HealthStatus, String> {
    // Argo CD opens the base, table, package and a reduced os library; the
    // scripts use none of package/os, so base + table is the same surface
    // (a script calling string.* fails here as it would there).
    let lua = Lua::new_with(StdLib::TABLE, LuaOptions::default()).map_err(|e| e.to_string())?;
    let globals = lua.globals();
    globals
        .set("obj", to_lua(&lua, obj).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    if !matches!(
        globals
            .get::<LuaValue>("string")
            .map_err(|e| e.to_string())?,
        LuaValue::Nil
    ) {
        return Err("the string library must not be loaded".into());
    }
    let ret: LuaValue = lua
        .load(script)
        .set_name(name)
        .eval()
        .map_err(|e| format!("script error: {e}"))?;
    let table = match ret {
        LuaValue::Table(t) => t,
        LuaValue::Nil => return Ok(HealthStatus::default()),
        other => {
            return Err(format!(
                "script returned a {}, not a table",
                other.type_name()
            ));
        }
    };
    let field = |k: &str| -> Result<String, String> {
        match table.get::<LuaValue>(k).map_err(|e| e.to_string())? {
            LuaValue::Nil => Ok(String::new()),
            LuaValue::String(s) => Ok(s.to_str().map_err(|e| e.to_string())?.to_string()),
            other => Err(format!("{k} is a {}, not a string", other.type_name())),
        }
    };
    Ok(HealthStatus {
        status: field("status")?,
        message: field("message")?,
    })
}

#[test]
fn every_kind_has_a_health_check_with_tests_for_each_outcome() {
    let mut problems = Vec::new();
    for kind in kinds() {
        let dir = kind_dir(&kind);
        if !dir.join("health.lua").is_file() {
            problems.push(format!("{kind}: {}/health.lua missing", dir.display()));
            continue;
        }
        let tests = load_tests(&kind);
        for want in ["Healthy", "Progressing", "Degraded"] {
            if !tests.iter().any(|t| t.health_status.status == want) {
                problems.push(format!("{kind}: no health_test.yaml case expecting {want}"));
            }
        }
        for t in &tests {
            if !ARGO_STATUSES.contains(&t.health_status.status.as_str()) {
                problems.push(format!(
                    "{kind}: {}: {:?} is not an Argo CD health status",
                    t.input_path, t.health_status.status
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn health_scripts_give_the_expected_status_and_message() {
    let mut failures = Vec::new();
    let mut cases = 0;
    for kind in kinds() {
        let script = read(&kind_dir(&kind).join("health.lua"));
        for t in load_tests(&kind) {
            cases += 1;
            let obj = load_object(&kind, &t.input_path);
            match run_health(&script, &format!("{kind}/health.lua"), &obj) {
                Ok(got) if got == t.health_status => {}
                Ok(got) => failures.push(format!(
                    "{kind} {}: want {:?}, got {got:?}",
                    t.input_path, t.health_status
                )),
                Err(e) => failures.push(format!("{kind} {}: {e}", t.input_path)),
            }
        }
    }
    assert!(cases >= 20, "only {cases} health test cases");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_script_that_uses_the_string_library_fails_as_in_argo_cd() {
    let obj = serde_json::json!({"metadata": {"name": "x"}});
    let err = run_health("return {status = string.upper('healthy')}", "bad.lua", &obj).unwrap_err();
    assert!(err.contains("script error"), "{err}");
}

/// Each testdata object, read as its Rust type and written back, keeps every
/// field: the cases describe objects the operator can actually produce.
#[test]
fn testdata_objects_are_valid_resources() {
    let mut failures = Vec::new();
    for kind in kinds() {
        for t in load_tests(&kind) {
            let obj = load_object(&kind, &t.input_path);
            let round = match kind.as_str() {
                "Switch" => round_trip::<p4fleet_crds::Switch>(&obj),
                "P4Program" => round_trip::<p4fleet_crds::P4Program>(&obj),
                "VirtualSwitch" => round_trip::<p4fleet_crds::VirtualSwitch>(&obj),
                "TableEntrySet" => round_trip::<p4fleet_crds::TableEntrySet>(&obj),
                "AsyncExternPolicy" => round_trip::<p4fleet_crds::AsyncExternPolicy>(&obj),
                other => Err(format!("no Rust type for kind {other}")),
            };
            let problem = match round {
                Ok(back) => json_subset_mismatch(&obj, &back, ""),
                Err(e) => Some(e),
            };
            if obj["kind"] != Value::String(kind.clone()) {
                failures.push(format!("{kind} {}: kind is {}", t.input_path, obj["kind"]));
            }
            if let Some(p) = problem {
                failures.push(format!("{kind} {}: {p}", t.input_path));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn round_trip<K: serde::de::DeserializeOwned + serde::Serialize>(
    obj: &Value,
) -> Result<Value, String> {
    let typed: K = serde_json::from_value(obj.clone()).map_err(|e| e.to_string())?;
    serde_json::to_value(&typed).map_err(|e| e.to_string())
}

#[test]
fn argocd_cm_patch_carries_each_script_verbatim() {
    let path = repo_root().join(ARGOCD_CM_PATCH);
    let patch: Value = serde_yaml::from_str(&read(&path)).expect("argocd-cm patch YAML");
    let data: BTreeMap<String, String> = serde_json::from_value(patch["data"].clone())
        .unwrap_or_else(|e| panic!("{}: data: {e}", path.display()));
    let want: BTreeMap<String, String> = kinds()
        .into_iter()
        .map(|kind| {
            let script = read(&kind_dir(&kind).join("health.lua"));
            (
                format!("resource.customizations.health.p4fleet.dev_{kind}"),
                script,
            )
        })
        .collect();
    for (key, script) in &want {
        match data.get(key) {
            Some(got) => assert_eq!(
                got, script,
                "{key} in {ARGOCD_CM_PATCH} differs from health.lua"
            ),
            None => panic!("{ARGOCD_CM_PATCH} lacks {key}"),
        }
    }
    assert_eq!(
        data.len(),
        want.len(),
        "extra keys in {ARGOCD_CM_PATCH}: {:?}",
        data.keys()
    );
}
