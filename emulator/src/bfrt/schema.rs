//! What the emulator needs from a bfrt.json, checked once when a program is
//! loaded so that writes only do table lookups.

use serde::Deserialize;

use crate::key::MatchKind;

/// A bfrt.json that cannot be realized.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid bfrt.json: {0}")]
pub struct BfrtSchemaError(pub String);

fn bad(msg: impl Into<String>) -> BfrtSchemaError {
    BfrtSchemaError(msg.into())
}

/// The match kind a bfrt.json `match_type` names.
fn match_kind(s: &str) -> Option<MatchKind> {
    Some(match s {
        "Exact" => MatchKind::Exact,
        "LPM" => MatchKind::Lpm,
        "Ternary" => MatchKind::Ternary,
        "Range" => MatchKind::Range,
        "Optional" => MatchKind::Optional,
        _ => return None,
    })
}

/// Value types of key and data fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldType {
    /// Big-endian bytes, `ceil(width / 8)` of them (`bytes`, `uint8..64`).
    Bytes {
        width: u32,
    },
    Bool,
    Str,
    Float,
    /// Anything else (e.g. repeated ints): accepted as sent, not checked.
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyDef {
    pub id: u32,
    pub name: String,
    pub kind: MatchKind,
    pub width: u32,
    pub nbytes: usize,
    /// Offset of this field in the internal key.
    pub offset: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataDef {
    pub id: u32,
    pub name: String,
    pub ty: FieldType,
    pub mandatory: bool,
    pub read_only: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionDef {
    pub id: u32,
    pub name: String,
    pub default_only: bool,
    pub table_only: bool,
    pub data: Vec<DataDef>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableDef {
    pub id: u32,
    pub name: String,
    pub table_type: String,
    /// `None` when bfrt.json says size 0.
    pub size: Option<usize>,
    pub keys: Vec<KeyDef>,
    pub key_len: usize,
    /// Action specs; empty for tables whose data are only singletons.
    pub actions: Vec<ActionDef>,
    /// Table-level data fields (singletons), e.g. `$PORT_ENABLE`.
    pub data: Vec<DataDef>,
    /// Why writes to this table are refused (e.g. a string key), if they are.
    pub unsupported: Option<String>,
    /// Action the default entry starts with (0 = none).
    pub initial_default: u32,
    /// What kind of stateful resource the table is or has.
    pub stateful: Stateful,
}

/// Ids of a direct counter's data fields on a match table (the table-level
/// singletons `$COUNTER_SPEC_BYTES` / `$COUNTER_SPEC_PKTS`; one of them is
/// absent when the counter's unit does not count it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CounterFields {
    pub bytes: Option<u32>,
    pub packets: Option<u32>,
}

impl CounterFields {
    /// The counter fields among `data` (table-level singletons).
    fn find(data: &[DataDef]) -> CounterFields {
        let id = |name: &str| data.iter().find(|d| d.name == name).map(|d| d.id);
        CounterFields {
            bytes: id(COUNTER_SPEC_BYTES),
            packets: id(COUNTER_SPEC_PKTS),
        }
    }

    fn any(&self) -> bool {
        self.bytes.is_some() || self.packets.is_some()
    }

    /// Whether `id` is one of the counter's fields.
    pub fn has(&self, id: u32) -> bool {
        self.bytes == Some(id) || self.packets == Some(id)
    }
}

/// Stateful resources as bfrt.json shows them: a match table with a
/// direct counter, or an indirect array (`table_type` `Counter`,
/// `Register`, `Meter`) addressed by a `$..._INDEX` key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Stateful {
    #[default]
    None,
    /// A match table whose entries each carry a counter.
    DirectCounter(CounterFields),
    /// An array of `size` cells; every cell exists (reads 0 / the default
    /// until written).
    Array(ArrayKind),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArrayKind {
    Counter(CounterFields),
    /// Register cells: one value per pipe when read (bf_switchd returns a
    /// register field once per pipe of the program).
    Register,
    Meter,
}

impl ArrayKind {
    pub fn name(&self) -> &'static str {
        match self {
            ArrayKind::Counter(_) => "Counter",
            ArrayKind::Register => "Register",
            ArrayKind::Meter => "Meter",
        }
    }

    /// The index key field's name.
    pub fn index_key(&self) -> &'static str {
        match self {
            ArrayKind::Counter(_) => "$COUNTER_INDEX",
            ArrayKind::Register => "$REGISTER_INDEX",
            ArrayKind::Meter => "$METER_INDEX",
        }
    }
}

/// Data field names of counters in bfrt.json (match tables with a direct
/// counter and `Counter` tables).
pub const COUNTER_SPEC_BYTES: &str = "$COUNTER_SPEC_BYTES";
pub const COUNTER_SPEC_PKTS: &str = "$COUNTER_SPEC_PKTS";

impl TableDef {
    pub fn key(&self, id: u32) -> Option<(usize, &KeyDef)> {
        self.keys.iter().enumerate().find(|(_, k)| k.id == id)
    }

    pub fn action(&self, id: u32) -> Option<&ActionDef> {
        self.actions.iter().find(|a| a.id == id)
    }
}

/// Tables of one program (or the fixed tables), by id, plus names.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BfrtSchema {
    pub tables: crate::key::IdMap<TableDef>,
}

#[derive(Deserialize)]
struct JInfo {
    #[serde(default)]
    tables: Vec<JTable>,
}

#[derive(Deserialize)]
struct JTable {
    name: String,
    id: u32,
    #[serde(default)]
    table_type: String,
    #[serde(default)]
    size: u64,
    #[serde(default)]
    key: Vec<JKey>,
    #[serde(default)]
    action_specs: Vec<JAction>,
    #[serde(default)]
    data: Vec<JTableData>,
}

#[derive(Deserialize)]
struct JKey {
    id: u32,
    name: String,
    match_type: String,
    r#type: JType,
}

#[derive(Deserialize, Clone)]
struct JType {
    r#type: String,
    #[serde(default)]
    width: Option<u32>,
}

#[derive(Deserialize)]
struct JAction {
    id: u32,
    name: String,
    #[serde(default)]
    action_scope: Option<String>,
    #[serde(default)]
    data: Vec<JData>,
}

#[derive(Deserialize)]
struct JData {
    id: u32,
    name: String,
    #[serde(default)]
    mandatory: bool,
    #[serde(default)]
    read_only: bool,
    #[serde(default)]
    repeated: bool,
    r#type: Option<JType>,
}

#[derive(Deserialize)]
struct JTableData {
    #[serde(default)]
    mandatory: bool,
    #[serde(default)]
    read_only: bool,
    singleton: Option<JData>,
}

fn field_type(t: Option<&JType>, repeated: bool) -> FieldType {
    let Some(t) = t else {
        return FieldType::Other;
    };
    if repeated {
        return FieldType::Other;
    }
    match t.r#type.as_str() {
        "bytes" => match t.width {
            Some(w) if w > 0 => FieldType::Bytes { width: w },
            _ => FieldType::Other,
        },
        "uint8" => FieldType::Bytes { width: 8 },
        "uint16" => FieldType::Bytes { width: 16 },
        "uint32" => FieldType::Bytes { width: 32 },
        "uint64" => FieldType::Bytes { width: 64 },
        "bool" => FieldType::Bool,
        "string" => FieldType::Str,
        "float" => FieldType::Float,
        _ => FieldType::Other,
    }
}

fn data_def(d: &JData, mandatory: bool, read_only: bool) -> DataDef {
    DataDef {
        id: d.id,
        name: d.name.clone(),
        ty: field_type(d.r#type.as_ref(), d.repeated),
        mandatory,
        read_only,
    }
}

impl BfrtSchema {
    /// Parses a bfrt.json (`{"tables": [...]}`).
    pub fn from_json(bytes: &[u8]) -> Result<BfrtSchema, BfrtSchemaError> {
        let info: JInfo = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
        let mut tables =
            crate::key::IdMap::with_capacity_and_hasher(info.tables.len(), Default::default());
        for t in info.tables {
            let def = table_def(t)?;
            let (id, name) = (def.id, def.name.clone());
            if tables.insert(id, def).is_some() {
                return Err(bad(format!("duplicate table id {id} ({name})")));
            }
        }
        Ok(BfrtSchema { tables })
    }
}

fn table_def(t: JTable) -> Result<TableDef, BfrtSchemaError> {
    if t.id == 0 {
        return Err(bad(format!("table {} has id 0", t.name)));
    }
    let mut keys: Vec<KeyDef> = Vec::with_capacity(t.key.len());
    let mut offset = 0;
    let mut unsupported = None;
    for k in &t.key {
        let kind = match_kind(&k.match_type).ok_or_else(|| {
            bad(format!(
                "table {} key {} has unknown match type {:?}",
                t.name, k.name, k.match_type
            ))
        })?;
        if keys.iter().any(|q| q.id == k.id) {
            return Err(bad(format!(
                "table {} has duplicate key id {}",
                t.name, k.id
            )));
        }
        let width = match field_type(Some(&k.r#type), false) {
            FieldType::Bytes { width } => width,
            FieldType::Bool => 1,
            other => {
                unsupported.get_or_insert_with(|| {
                    format!("table {} key {} has type {other:?}", t.name, k.name)
                });
                8
            }
        };
        let nbytes = width.div_ceil(8) as usize;
        keys.push(KeyDef {
            id: k.id,
            name: k.name.clone(),
            kind,
            width,
            nbytes,
            offset,
        });
        offset += kind.key_len(nbytes);
    }
    let mut actions = Vec::with_capacity(t.action_specs.len());
    for a in &t.action_specs {
        if a.id == 0 || actions.iter().any(|b: &ActionDef| b.id == a.id) {
            return Err(bad(format!(
                "table {} has invalid or duplicate action id {}",
                t.name, a.id
            )));
        }
        let scope = a.action_scope.as_deref().unwrap_or("TableAndDefault");
        actions.push(ActionDef {
            id: a.id,
            name: a.name.clone(),
            default_only: scope == "DefaultOnly",
            table_only: scope == "TableOnly",
            data: a
                .data
                .iter()
                .map(|d| data_def(d, d.mandatory, d.read_only))
                .collect(),
        });
    }
    let data: Vec<DataDef> = t
        .data
        .iter()
        .filter_map(|d| {
            d.singleton
                .as_ref()
                .map(|s| data_def(s, d.mandatory, d.read_only))
        })
        .collect();
    let initial_default = actions
        .iter()
        .find(|a| !a.table_only && a.data.is_empty())
        .map(|a| a.id)
        .unwrap_or(0);
    let stateful = stateful(&t.name, &t.table_type, t.size, &keys, &actions, &data)?;
    Ok(TableDef {
        id: t.id,
        name: t.name,
        table_type: t.table_type,
        size: (t.size > 0).then_some(t.size as usize),
        keys,
        key_len: offset,
        actions,
        data,
        unsupported,
        initial_default,
        stateful,
    })
}

/// What stateful resource a table is, checked as bf_switchd would refuse
/// a bfrt.json it cannot realize: an array table has exactly the index key
/// (`uint32`, Exact), a positive size and no actions; a register has data
/// fields and a counter table counter fields.
fn stateful(
    name: &str,
    table_type: &str,
    size: u64,
    keys: &[KeyDef],
    actions: &[ActionDef],
    data: &[DataDef],
) -> Result<Stateful, BfrtSchemaError> {
    let counter = CounterFields::find(data);
    let kind = match table_type {
        "Counter" => ArrayKind::Counter(counter),
        "Register" => ArrayKind::Register,
        "Meter" => ArrayKind::Meter,
        _ if counter.any() => return Ok(Stateful::DirectCounter(counter)),
        _ => return Ok(Stateful::None),
    };
    let index = kind.index_key();
    match keys {
        [k] if k.name == index && k.kind == MatchKind::Exact && k.width == 32 => {}
        _ => {
            return Err(bad(format!(
                "{} table {name} must have exactly one key, {index} (Exact uint32)",
                kind.name()
            )));
        }
    }
    if size == 0 || size > u64::from(u32::MAX) {
        return Err(bad(format!("{} table {name} has size {size}", kind.name())));
    }
    if !actions.is_empty() {
        return Err(bad(format!(
            "{} table {name} has action specs",
            kind.name()
        )));
    }
    let empty = match kind {
        ArrayKind::Counter(c) => !c.any(),
        ArrayKind::Register | ArrayKind::Meter => data.is_empty(),
    };
    if empty {
        return Err(bad(format!(
            "{} table {name} has no data fields",
            kind.name()
        )));
    }
    Ok(Stateful::Array(kind))
}

/// The non-P4 bfrt.json a device of `pipes` hardware pipes returns in
/// GetForwardingPipelineConfig: [`NON_P4_JSON`] with the pipe count as a
/// top-level `p4fleet_pipes` field. BF Runtime has no message that says
/// how many pipes a chip has; p4fleet reads it here (docs/bfrt.md, "How
/// the operator learns the pipe count"). Clients that parse the tables
/// (rbfrt) ignore fields they do not know.
pub fn non_p4_json(pipes: u32) -> String {
    NON_P4_JSON.replacen(
        "\"schema_version\": \"1.0.0\",",
        &format!("\"schema_version\": \"1.0.0\",\n  \"p4fleet_pipes\": {pipes},"),
        1,
    )
}

/// The fixed (non-P4) tables the emulator advertises: enough for clients
/// that look them up at connect time (ports, mirror sessions, multicast).
pub const NON_P4_JSON: &str = r#"{
  "schema_version": "1.0.0",
  "tables": [
    {
      "name": "$PORT", "id": 4278255617, "table_type": "PortConfigure", "size": 512,
      "annotations": [], "depends_on": [], "has_const_default_action": false,
      "key": [
        {"id": 1, "name": "$DEV_PORT", "repeated": false, "annotations": [], "mandatory": true,
         "match_type": "Exact", "type": {"type": "uint32"}}
      ],
      "data": [
        {"mandatory": true, "read_only": false, "singleton": {"id": 1, "name": "$SPEED", "repeated": false, "annotations": [], "type": {"type": "string"}}},
        {"mandatory": true, "read_only": false, "singleton": {"id": 2, "name": "$FEC", "repeated": false, "annotations": [], "type": {"type": "string"}}},
        {"mandatory": false, "read_only": false, "singleton": {"id": 3, "name": "$PORT_ENABLE", "repeated": false, "annotations": [], "type": {"type": "bool"}}},
        {"mandatory": false, "read_only": false, "singleton": {"id": 4, "name": "$AUTO_NEGOTIATION", "repeated": false, "annotations": [], "type": {"type": "string"}}},
        {"mandatory": false, "read_only": false, "singleton": {"id": 5, "name": "$LOOPBACK_MODE", "repeated": false, "annotations": [], "type": {"type": "string"}}},
        {"mandatory": false, "read_only": false, "singleton": {"id": 6, "name": "$N_LANES", "repeated": false, "annotations": [], "type": {"type": "uint32"}}},
        {"mandatory": false, "read_only": true, "singleton": {"id": 7, "name": "$PORT_UP", "repeated": false, "annotations": [], "type": {"type": "bool"}}}
      ],
      "supported_operations": [], "attributes": ["PortStatusChangeNotification"]
    },
    {
      "name": "$PORT_STR_INFO", "id": 4278255618, "table_type": "PortStrInfo", "size": 512,
      "annotations": [], "depends_on": [], "has_const_default_action": false,
      "key": [
        {"id": 1, "name": "$PORT_NAME", "repeated": false, "annotations": [], "mandatory": true,
         "match_type": "Exact", "type": {"type": "string"}}
      ],
      "data": [
        {"mandatory": false, "read_only": true, "singleton": {"id": 1, "name": "$DEV_PORT", "repeated": false, "annotations": [], "type": {"type": "uint32"}}}
      ],
      "supported_operations": [], "attributes": []
    },
    {
      "name": "$mirror.cfg", "id": 4278255619, "table_type": "MirrorCfg", "size": 1024,
      "annotations": [], "depends_on": [], "has_const_default_action": false,
      "key": [
        {"id": 1, "name": "$sid", "repeated": false, "annotations": [], "mandatory": true,
         "match_type": "Exact", "type": {"type": "uint16"}}
      ],
      "action_specs": [
        {"id": 1, "name": "$normal", "action_scope": "TableAndDefault", "annotations": [], "data": [
          {"id": 1, "name": "$session_enable", "repeated": false, "mandatory": false, "read_only": false, "annotations": [], "type": {"type": "bool"}},
          {"id": 2, "name": "$direction", "repeated": false, "mandatory": false, "read_only": false, "annotations": [], "type": {"type": "string"}},
          {"id": 3, "name": "$ucast_egress_port", "repeated": false, "mandatory": false, "read_only": false, "annotations": [], "type": {"type": "uint32"}},
          {"id": 4, "name": "$ucast_egress_port_valid", "repeated": false, "mandatory": false, "read_only": false, "annotations": [], "type": {"type": "bool"}},
          {"id": 5, "name": "$max_pkt_len", "repeated": false, "mandatory": false, "read_only": false, "annotations": [], "type": {"type": "uint16"}}
        ]}
      ],
      "data": [],
      "supported_operations": [], "attributes": []
    },
    {
      "name": "$pre.mgid", "id": 4278255620, "table_type": "PreMgid", "size": 65536,
      "annotations": [], "depends_on": [], "has_const_default_action": false,
      "key": [
        {"id": 1, "name": "$MGID", "repeated": false, "annotations": [], "mandatory": true,
         "match_type": "Exact", "type": {"type": "uint16"}}
      ],
      "data": [
        {"mandatory": false, "read_only": false, "singleton": {"id": 1, "name": "$MULTICAST_NODE_ID", "repeated": true, "annotations": [], "type": {"type": "uint32"}}},
        {"mandatory": false, "read_only": false, "singleton": {"id": 2, "name": "$MULTICAST_NODE_L1_XID_VALID", "repeated": true, "annotations": [], "type": {"type": "bool"}}},
        {"mandatory": false, "read_only": false, "singleton": {"id": 3, "name": "$MULTICAST_NODE_L1_XID", "repeated": true, "annotations": [], "type": {"type": "uint16"}}}
      ],
      "supported_operations": [], "attributes": []
    },
    {
      "name": "$pre.node", "id": 4278255621, "table_type": "PreNode", "size": 16777216,
      "annotations": [], "depends_on": [], "has_const_default_action": false,
      "key": [
        {"id": 1, "name": "$MULTICAST_NODE_ID", "repeated": false, "annotations": [], "mandatory": true,
         "match_type": "Exact", "type": {"type": "uint32"}}
      ],
      "data": [
        {"mandatory": false, "read_only": false, "singleton": {"id": 1, "name": "$MULTICAST_RID", "repeated": false, "annotations": [], "type": {"type": "uint16"}}},
        {"mandatory": false, "read_only": false, "singleton": {"id": 2, "name": "$MULTICAST_LAG_ID", "repeated": true, "annotations": [], "type": {"type": "uint32"}}},
        {"mandatory": false, "read_only": false, "singleton": {"id": 3, "name": "$DEV_PORT", "repeated": true, "annotations": [], "type": {"type": "uint32"}}}
      ],
      "supported_operations": [], "attributes": []
    }
  ],
  "learn_filters": []
}"#;

#[cfg(test)]
mod tests {
    use super::*;

    const FIREWALL: &str = include_str!("../../../examples/firewall/bfrt.json");
    const ROUTER: &str = include_str!("../../../examples/router/bfrt.json");

    #[test]
    fn parses_examples_and_fixed_tables() {
        let s = BfrtSchema::from_json(FIREWALL.as_bytes()).unwrap();
        let t = s
            .tables
            .values()
            .find(|t| t.name == "pipe.MyIngress.firewall")
            .unwrap();
        assert_eq!(t.keys.len(), 2);
        assert_eq!(t.key_len, 8);
        assert_eq!(t.size, Some(65536));
        let allow = t
            .actions
            .iter()
            .find(|a| a.name == "MyIngress.allow")
            .unwrap();
        assert_eq!(allow.data[0].ty, FieldType::Bytes { width: 9 });
        assert_eq!(
            t.initial_default,
            t.actions
                .iter()
                .find(|a| a.name == "MyIngress.drop")
                .unwrap()
                .id
        );

        let r = BfrtSchema::from_json(ROUTER.as_bytes()).unwrap();
        let acl = r
            .tables
            .values()
            .find(|t| t.name == "pipe.MyIngress.acl")
            .unwrap();
        assert!(acl.keys.iter().any(|k| k.name == "$MATCH_PRIORITY"));

        let fixed = BfrtSchema::from_json(NON_P4_JSON.as_bytes()).unwrap();
        let port = fixed.tables.values().find(|t| t.name == "$PORT").unwrap();
        assert!(port.unsupported.is_none());
        assert_eq!(port.data.len(), 7);
        let info = fixed
            .tables
            .values()
            .find(|t| t.name == "$PORT_STR_INFO")
            .unwrap();
        assert!(info.unsupported.is_some());
        // The pipe count rides along without changing the tables.
        let with_pipes = non_p4_json(2);
        let v: serde_json::Value = serde_json::from_str(&with_pipes).unwrap();
        assert_eq!(v["p4fleet_pipes"], 2);
        let again = BfrtSchema::from_json(with_pipes.as_bytes()).unwrap();
        assert_eq!(again.tables.len(), fixed.tables.len());
    }

    #[test]
    fn stateful_tables_are_recognized_and_checked() {
        let s =
            BfrtSchema::from_json(include_str!("../../../examples/counted/bfrt.json").as_bytes())
                .unwrap();
        let kind = |name: &str| s.tables.values().find(|t| t.name == name).unwrap().stateful;
        assert_eq!(
            kind("pipe.MyIngress.dmac"),
            Stateful::DirectCounter(CounterFields {
                bytes: Some(65553),
                packets: Some(65554)
            })
        );
        assert_eq!(
            kind("pipe.MyIngress.port_last_seen"),
            Stateful::Array(ArrayKind::Register)
        );
        assert_eq!(
            kind("pipe.MyIngress.port_meter"),
            Stateful::Array(ArrayKind::Meter)
        );
        assert!(matches!(
            kind("pipe.MyIngress.port_counter"),
            Stateful::Array(ArrayKind::Counter(_))
        ));
        // A register table needs exactly its index key, a size and data.
        let reg = |key: &str, size: u32, data: &str| {
            format!(
                r#"{{"tables":[{{"name":"pipe.r","id":1,"table_type":"Register","size":{size},
                "key":[{key}],"data":[{data}]}}]}}"#
            )
        };
        let index = r#"{"id":65557,"name":"$REGISTER_INDEX","match_type":"Exact","type":{"type":"uint32"}}"#;
        let f1 = r#"{"mandatory":true,"singleton":{"id":1,"name":"r.f1","type":{"type":"bytes","width":16}}}"#;
        assert!(BfrtSchema::from_json(reg(index, 8, f1).as_bytes()).is_ok());
        let other = r#"{"id":1,"name":"idx","match_type":"Exact","type":{"type":"uint32"}}"#;
        assert!(BfrtSchema::from_json(reg(other, 8, f1).as_bytes()).is_err());
        assert!(BfrtSchema::from_json(reg(index, 0, f1).as_bytes()).is_err());
        assert!(BfrtSchema::from_json(reg(index, 8, "").as_bytes()).is_err());
    }

    #[test]
    fn refuses_bad_json() {
        assert!(BfrtSchema::from_json(b"{").is_err());
        assert!(
            BfrtSchema::from_json(
                br#"{"tables":[{"name":"t","id":1,"key":[{"id":1,"name":"k","match_type":"Fuzzy","type":{"type":"uint8"}}]}]}"#
            )
            .is_err()
        );
    }
}
