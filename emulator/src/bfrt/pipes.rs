//! Which hardware pipes each program of a BFRT device config runs on.
//!
//! BF Runtime's SetForwardingPipelineConfig carries the *entire* device's
//! config: every program (`p4_name`, bfrt.json) with its profiles, each
//! profile scoped to a set of pipes (`pipe_scope`). Several programs share
//! one chip by taking disjoint pipe sets (the SDE's multiple-program
//! examples put one program on the external pipes and another on the
//! internal ones). A pipe in two profiles cannot be configured, and
//! bf_switchd refuses the config; so does this check, with
//! INVALID_ARGUMENT naming both owners. Pure.

use std::collections::BTreeSet;

use p4fleet_proto::bfrt::ForwardingPipelineConfig;

/// Pipes of a Tofino-1 with four pipes (the 64-port parts); two-pipe parts
/// are configured with `--tofino-pipes 2`.
pub const DEFAULT_PIPES: u32 = 4;

/// Most pipes a chip has (Tofino-3 has eight).
pub const MAX_PIPES: u32 = 8;

/// The pipes each program of `configs` claims, in order: the union of its
/// profiles' `pipe_scope`s, an empty scope meaning every pipe of the device
/// (bf_switchd's default for a profile without one). A program without
/// profiles (the emulator's preloaded bfrt.json) claims none.
pub fn claimed(
    configs: &[ForwardingPipelineConfig],
    pipes: u32,
) -> Result<Vec<BTreeSet<u32>>, String> {
    // (pipe, program, profile) of every pipe claimed so far.
    let mut owners: Vec<(u32, &str, &str)> = Vec::new();
    let mut out = Vec::with_capacity(configs.len());
    for c in configs {
        let mut program_pipes = BTreeSet::new();
        for p in &c.profiles {
            let scope: Vec<u32> = if p.pipe_scope.is_empty() {
                (0..pipes).collect()
            } else {
                p.pipe_scope.clone()
            };
            let mut seen = BTreeSet::new();
            for &pipe in &scope {
                if pipe >= pipes {
                    return Err(format!(
                        "program {} profile {}: pipe_scope names pipe {pipe}, but the device has pipes 0-{}",
                        c.p4_name,
                        p.profile_name,
                        pipes - 1
                    ));
                }
                if !seen.insert(pipe) {
                    return Err(format!(
                        "program {} profile {}: pipe_scope names pipe {pipe} twice",
                        c.p4_name, p.profile_name
                    ));
                }
                if let Some((_, prog, prof)) = owners.iter().find(|(q, _, _)| *q == pipe) {
                    return Err(format!(
                        "program {} profile {}: pipe {pipe} is already in the pipe_scope of program {prog} profile {prof}; programs need disjoint pipes",
                        c.p4_name, p.profile_name
                    ));
                }
            }
            for &pipe in &seen {
                owners.push((pipe, &c.p4_name, &p.profile_name));
            }
            program_pipes.extend(seen);
        }
        out.push(program_pipes);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use p4fleet_proto::bfrt::forwarding_pipeline_config::Profile;

    fn config(name: &str, scopes: &[&[u32]]) -> ForwardingPipelineConfig {
        ForwardingPipelineConfig {
            p4_name: name.into(),
            bfruntime_info: vec![],
            profiles: scopes
                .iter()
                .enumerate()
                .map(|(i, s)| Profile {
                    profile_name: format!("{name}_{i}"),
                    pipe_scope: s.to_vec(),
                    ..Default::default()
                })
                .collect(),
        }
    }

    fn set(p: &[u32]) -> BTreeSet<u32> {
        p.iter().copied().collect()
    }

    #[test]
    fn disjoint_programs_get_their_pipes_and_an_empty_scope_is_every_pipe() {
        let got = claimed(&[config("a", &[&[0, 2]]), config("b", &[&[1], &[3]])], 4).unwrap();
        assert_eq!(got, [set(&[0, 2]), set(&[1, 3])]);
        assert_eq!(claimed(&[config("a", &[&[]])], 2).unwrap(), [set(&[0, 1])]);
        assert_eq!(claimed(&[config("a", &[])], 4).unwrap(), [set(&[])]);
    }

    #[test]
    fn overlapping_scopes_name_both_owners() {
        let e = claimed(&[config("a", &[&[0, 1]]), config("b", &[&[1, 2]])], 4).unwrap_err();
        assert_eq!(
            e,
            "program b profile b_0: pipe 1 is already in the pipe_scope of program a profile a_0; programs need disjoint pipes"
        );
        // An empty scope takes every pipe, so nothing else fits.
        assert!(claimed(&[config("a", &[&[]]), config("b", &[&[3]])], 4).is_err());
        // Two profiles of one program overlap too.
        assert!(claimed(&[config("a", &[&[0], &[0]])], 4).is_err());
    }

    #[test]
    fn pipes_beyond_the_device_and_repeats_are_refused() {
        let e = claimed(&[config("a", &[&[0, 1, 2, 3]])], 2).unwrap_err();
        assert_eq!(
            e,
            "program a profile a_0: pipe_scope names pipe 2, but the device has pipes 0-1"
        );
        assert!(
            claimed(&[config("a", &[&[1, 1]])], 4)
                .unwrap_err()
                .contains("twice")
        );
    }
}
