//! Action profiles (ECMP) on a TableEntrySet: the members and groups of
//! the table's action profile or selector, by name (entries name them in
//! `member`/`group`, or give a one-shot `actionSet`).
//! docs/entities/action-profiles.md.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `spec.actionProfile`: the members and groups of the table's action
/// profile (its P4Info `implementation_id`). The set owns the profile on
/// its targets: members and groups not listed here are removed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActionProfileSpec {
    /// Members: an action with its parameters, e.g. one next hop.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 4096))]
    pub members: Vec<ProfileMember>,
    /// Groups of members with weights (action selectors only), e.g. one
    /// ECMP group.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 4096))]
    pub groups: Vec<ProfileGroup>,
}

/// One action profile member.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProfileMember {
    /// Name that groups and entries use.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// P4Runtime member id; assigned from the name when absent.
    #[schemars(range(min = 1, max = 2147483647))]
    pub id: Option<u32>,
    /// Action name, e.g. `MyIngress.set_nhop` or `set_nhop`.
    #[schemars(length(min = 1, max = 255))]
    pub action: String,
    /// Action parameter name to value; integers may be written unquoted.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "crate::entry_set::int_or_string::map"
    )]
    #[schemars(extend(
        "maxProperties" = 64,
        "additionalProperties" = {"x-kubernetes-int-or-string": true, "maxLength": 256, "minLength": 1}
    ))]
    pub params: BTreeMap<String, String>,
}

/// One group of an action selector.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProfileGroup {
    /// Name that entries use.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// P4Runtime group id; assigned from the name when absent.
    #[schemars(range(min = 1, max = 2147483647))]
    pub id: Option<u32>,
    /// The group's maximum size (at most the profile's `max_group_size`);
    /// the profile's when absent.
    #[schemars(range(min = 1, max = 2147483647))]
    pub max_size: Option<i32>,
    /// Members of the group, by name, each once.
    #[serde(default)]
    #[schemars(length(max = 4096))]
    pub members: Vec<GroupMember>,
}

/// A member of a group, with its weight.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GroupMember {
    /// Member name (`spec.actionProfile.members[].name`).
    #[schemars(length(min = 1, max = 63))]
    pub member: String,
    /// Weight, 1 when absent.
    #[schemars(range(min = 1, max = 2147483647))]
    pub weight: Option<i32>,
}

/// One action of a one-shot action set.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WeightedAction {
    #[schemars(length(min = 1, max = 255))]
    pub action: String,
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "crate::entry_set::int_or_string::map"
    )]
    #[schemars(extend(
        "maxProperties" = 64,
        "additionalProperties" = {"x-kubernetes-int-or-string": true, "maxLength": 256, "minLength": 1}
    ))]
    pub params: BTreeMap<String, String>,
    /// Weight, 1 when absent.
    #[schemars(range(min = 1, max = 2147483647))]
    pub weight: Option<i32>,
}

/// `status.actionProfile`: what every target confirmed on read-back (the
/// smallest count over targets).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActionProfileStatus {
    /// The profile's name in the P4Info.
    pub profile: String,
    /// Members read back as desired.
    pub members: u64,
    /// Groups read back as desired.
    pub groups: u64,
    /// Entries of the table read back with their member, group or set.
    pub entries: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_groups_and_action_sets_read_from_yaml() {
        let p: ActionProfileSpec = serde_yaml::from_str(
            "members:\n\
             - {name: nh1, action: set_nhop, params: {dmac: \"00:00:00:00:00:01\", port: 1}}\n\
             - {name: nh2, id: 7, action: set_nhop, params: {dmac: 2, port: 2}}\n\
             groups:\n\
             - {name: g, maxSize: 8, members: [{member: nh1}, {member: nh2, weight: 3}]}\n",
        )
        .unwrap();
        assert_eq!(p.members[0].params["port"], "1");
        assert_eq!(p.members[1].id, Some(7));
        assert_eq!(p.groups[0].members[1].weight, Some(3));
        assert_eq!(p.groups[0].max_size, Some(8));
        let e: crate::TableEntry = serde_yaml::from_str(
            "match: {dstAddr: 10.0.0.0/8}\nactionSet: [{action: set_nhop, params: {port: 1}, weight: 2}]",
        )
        .unwrap();
        assert!(e.is_indirect() && e.action.is_empty());
        assert_eq!(e.action_set[0].weight, Some(2));
        let e: crate::TableEntry =
            serde_yaml::from_str("match: {dstAddr: 10.0.0.0/8}\ngroup: g").unwrap();
        assert_eq!(e.group.as_deref(), Some("g"));
    }
}
