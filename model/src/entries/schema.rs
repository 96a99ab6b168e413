//! What the entry model needs to know about one table, independent of
//! where it came from (P4Info today; BFRT's bfrt.json could fill it too).

use super::error::EntryError;
use super::value::excerpt;

/// P4Runtime match kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MatchKind {
    Exact,
    Lpm,
    Ternary,
    Range,
    Optional,
}

impl MatchKind {
    /// Ternary, range and optional entries overlap, so they need a priority.
    pub fn needs_priority(self) -> bool {
        matches!(
            self,
            MatchKind::Ternary | MatchKind::Range | MatchKind::Optional
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldSchema {
    pub name: String,
    pub id: u32,
    pub bitwidth: u32,
    pub kind: MatchKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamSchema {
    pub name: String,
    pub id: u32,
    pub bitwidth: u32,
}

/// Where a table may use an action (P4Info `ActionRef.scope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ActionScope {
    #[default]
    TableAndDefault,
    TableOnly,
    DefaultOnly,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionSchema {
    /// Full name, e.g. `MyIngress.allow`.
    pub name: String,
    /// Short name, e.g. `allow` (empty if unknown).
    pub alias: String,
    pub id: u32,
    pub params: Vec<ParamSchema>,
    pub scope: ActionScope,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSchema {
    /// Full name, e.g. `MyIngress.firewall`.
    pub name: String,
    /// Short name, e.g. `firewall` (empty if unknown).
    pub alias: String,
    pub id: u32,
    pub size: u64,
    pub match_fields: Vec<FieldSchema>,
    pub actions: Vec<ActionSchema>,
    /// Entries are fixed in the program (`const entries`); writes fail.
    pub is_const: bool,
    /// The device notifies idle entries (P4Info `idle_timeout_behavior:
    /// NOTIFY_CONTROL`), so entries may carry an idle timeout. BFRT
    /// schemas say false: p4fleet does not model Tofino's entry TTL.
    pub idle_timeout: bool,
}

/// `full` is `name`, or ends with `.name`.
pub(crate) fn name_matches(full: &str, name: &str) -> bool {
    full == name
        || (full.len() > name.len()
            && full.ends_with(name)
            && full.as_bytes()[full.len() - name.len() - 1] == b'.')
}

impl ActionSchema {
    pub fn is_named(&self, name: &str) -> bool {
        self.alias == name || name_matches(&self.name, name)
    }

    /// The shortest name that finds this action again.
    pub fn short_name(&self) -> &str {
        if self.alias.is_empty() {
            &self.name
        } else {
            &self.alias
        }
    }

    pub fn param_index(&self, name: &str) -> Option<usize> {
        self.params.iter().position(|p| p.name == name)
    }
}

impl TableSchema {
    /// Whether entries of this table carry a priority.
    pub fn requires_priority(&self) -> bool {
        self.match_fields.iter().any(|f| f.kind.needs_priority())
    }

    /// Full name, alias, or a dotted suffix of the full name.
    pub fn is_named(&self, name: &str) -> bool {
        self.alias == name || name_matches(&self.name, name)
    }

    /// Finds a match field by full name (`hdr.ipv4.srcAddr`) or by a
    /// unique dotted suffix (`ipv4.srcAddr`, `srcAddr`).
    pub fn field_index(&self, name: &str) -> Result<usize, EntryError> {
        if let Some(i) = self.match_fields.iter().position(|f| f.name == name) {
            return Ok(i);
        }
        let mut found = None;
        for (i, f) in self.match_fields.iter().enumerate() {
            if name_matches(&f.name, name) {
                if let Some(j) = found {
                    let j: usize = j;
                    return Err(EntryError::AmbiguousField {
                        field: excerpt(name),
                        candidates: format!("{}, {}", self.match_fields[j].name, f.name),
                    });
                }
                found = Some(i);
            }
        }
        found.ok_or_else(|| EntryError::UnknownField {
            table: self.name.clone(),
            field: excerpt(name),
        })
    }

    pub fn field_by_id(&self, id: u32) -> Option<(usize, &FieldSchema)> {
        self.match_fields
            .iter()
            .enumerate()
            .find(|(_, f)| f.id == id)
    }

    /// Finds an action by full name, alias or dotted suffix, whatever its scope.
    pub fn action_index(&self, name: &str) -> Result<usize, EntryError> {
        self.find_action(name)
            .ok_or_else(|| self.unknown_action(name))
    }

    /// [`TableSchema::action_index`] without building the error: the line
    /// parser asks this of every positional line's first parameter.
    pub fn find_action(&self, name: &str) -> Option<usize> {
        self.actions
            .iter()
            .position(|a| a.name == name)
            .or_else(|| self.actions.iter().position(|a| a.is_named(name)))
    }

    pub fn unknown_action(&self, name: &str) -> EntryError {
        EntryError::UnknownAction {
            table: self.name.clone(),
            action: excerpt(name),
        }
    }

    pub fn action_by_id(&self, id: u32) -> Option<(usize, &ActionSchema)> {
        self.actions.iter().enumerate().find(|(_, a)| a.id == id)
    }

    /// The shortest name that finds this table again.
    pub fn short_name(&self) -> &str {
        if self.alias.is_empty() {
            &self.name
        } else {
            &self.alias
        }
    }

    /// Most parameters of any action; sizes scratch buffers.
    pub(crate) fn max_params(&self) -> usize {
        self.actions
            .iter()
            .map(|a| a.params.len())
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
pub(crate) mod fixtures {
    //! The example programs' P4Infos, and their tables as
    //! `TableSchema::from_p4info` builds them.
    use super::*;
    use p4fleet_proto::p4info::{self, P4Info};

    pub const FIREWALL_P4INFO: &str = include_str!("../../../examples/firewall/p4info.txt");
    pub const L2_P4INFO: &str = include_str!("../../../examples/l2switch/p4info.txt");
    pub const ROUTER_P4INFO: &str = include_str!("../../../examples/router/p4info.txt");
    pub const FIREWALL_BFRT: &str = include_str!("../../../examples/firewall/bfrt.json");
    pub const ROUTER_BFRT: &str = include_str!("../../../examples/router/bfrt.json");

    pub fn p4info(text: &str) -> P4Info {
        p4info::parse_text(text).unwrap()
    }

    /// Names to texts, as a spec gives match fields and params.
    pub fn map(kv: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn field(name: &str, id: u32, bitwidth: u32, kind: MatchKind) -> FieldSchema {
        FieldSchema {
            name: name.into(),
            id,
            bitwidth,
            kind,
        }
    }

    /// A table that is not const and has no idle timeout; its alias is
    /// the last part of its name.
    pub(crate) fn table(
        name: &str,
        id: u32,
        size: u64,
        match_fields: Vec<FieldSchema>,
        actions: Vec<ActionSchema>,
    ) -> TableSchema {
        TableSchema {
            name: name.into(),
            alias: name.rsplit('.').next().unwrap().into(),
            id,
            size,
            match_fields,
            actions,
            is_const: false,
            idle_timeout: false,
        }
    }

    /// An action for table entries and the default action alike.
    fn usable(name: &str, id: u32, params: &[(&str, u32)]) -> ActionSchema {
        action(name, id, params, ActionScope::TableAndDefault)
    }

    /// An action with params numbered from 1; its alias is the last part
    /// of its name.
    pub(crate) fn action(
        name: &str,
        id: u32,
        params: &[(&str, u32)],
        scope: ActionScope,
    ) -> ActionSchema {
        ActionSchema {
            name: name.into(),
            alias: name.rsplit('.').next().unwrap().into(),
            id,
            params: params
                .iter()
                .enumerate()
                .map(|(i, (n, w))| ParamSchema {
                    name: (*n).into(),
                    id: i as u32 + 1,
                    bitwidth: *w,
                })
                .collect(),
            scope,
        }
    }

    pub fn firewall() -> TableSchema {
        table(
            "MyIngress.firewall",
            39123287,
            65536,
            vec![
                field("hdr.ipv4.srcAddr", 1, 32, MatchKind::Exact),
                field("hdr.ipv4.dstAddr", 2, 32, MatchKind::Exact),
            ],
            vec![
                usable("MyIngress.allow", 17724422, &[("port", 9)]),
                usable("MyIngress.drop", 25652968, &[]),
            ],
        )
    }

    pub fn ipv4_lpm() -> TableSchema {
        table(
            "MyIngress.ipv4_lpm",
            37375156,
            16384,
            vec![field("hdr.ipv4.dstAddr", 1, 32, MatchKind::Lpm)],
            vec![
                usable("MyIngress.set_nhop", 24952588, &[("dmac", 48), ("port", 9)]),
                usable("MyIngress.drop", 25652968, &[]),
            ],
        )
    }

    pub fn acl() -> TableSchema {
        table(
            "MyIngress.acl",
            37519123,
            1024,
            vec![
                field("hdr.ipv4.srcAddr", 1, 32, MatchKind::Ternary),
                field("hdr.ipv4.dstAddr", 2, 32, MatchKind::Ternary),
                field("hdr.ipv4.protocol", 3, 8, MatchKind::Optional),
                field("meta.l4_dst_port", 4, 16, MatchKind::Range),
            ],
            vec![
                usable("MyIngress.permit", 32656341, &[]),
                usable("MyIngress.deny", 23481214, &[]),
                action("NoAction", 21257015, &[], ActionScope::DefaultOnly),
            ],
        )
    }

    pub fn dmac() -> TableSchema {
        table(
            "MyIngress.dmac",
            44918510,
            4096,
            vec![field("hdr.ethernet.dstAddr", 1, 48, MatchKind::Exact)],
            vec![
                usable("MyIngress.forward", 29683729, &[("port", 9)]),
                usable("MyIngress.broadcast", 22516369, &[]),
                usable("MyIngress.drop", 25652968, &[]),
            ],
        )
    }

    /// A table with two fields sharing a suffix, for ambiguity tests.
    pub fn v6() -> TableSchema {
        table(
            "MyIngress.v6",
            0x02000006,
            16,
            vec![
                field("hdr.ipv6.dstAddr", 1, 128, MatchKind::Exact),
                field("hdr.inner.dstAddr", 2, 128, MatchKind::Lpm),
            ],
            vec![action(
                "MyIngress.go",
                0x01000001,
                &[("x", 128)],
                ActionScope::TableOnly,
            )],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;

    #[test]
    fn field_lookup() {
        let t = firewall();
        assert_eq!(t.field_index("hdr.ipv4.srcAddr").unwrap(), 0);
        assert_eq!(t.field_index("ipv4.dstAddr").unwrap(), 1);
        assert_eq!(t.field_index("srcAddr").unwrap(), 0);
        assert!(matches!(
            t.field_index("Addr"),
            Err(EntryError::UnknownField { .. })
        ));
        assert!(matches!(
            t.field_index("hdr.ipv4.ttl"),
            Err(EntryError::UnknownField { .. })
        ));
        let v6 = v6();
        assert!(matches!(
            v6.field_index("dstAddr"),
            Err(EntryError::AmbiguousField { .. })
        ));
        assert_eq!(v6.field_index("inner.dstAddr").unwrap(), 1);
    }

    #[test]
    fn action_lookup() {
        let t = firewall();
        assert_eq!(t.action_index("MyIngress.allow").unwrap(), 0);
        assert_eq!(t.action_index("allow").unwrap(), 0);
        assert_eq!(t.action_index("drop").unwrap(), 1);
        assert!(t.action_index("forward").is_err());
        assert!(t.is_named("firewall") && t.is_named("MyIngress.firewall"));
        assert!(!t.is_named("wall"));
    }

    #[test]
    fn priority_needed() {
        assert!(!firewall().requires_priority());
        assert!(!ipv4_lpm().requires_priority());
        assert!(acl().requires_priority());
    }
}
