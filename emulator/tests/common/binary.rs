//! The `p4fleet-emulator` binary run as a child process.

use std::io::{BufRead, BufReader, Lines};
use std::process::{Child, ChildStdout, Command, Stdio};

pub const BIN: &str = env!("CARGO_BIN_EXE_p4fleet-emulator");

/// The binary serving, its listeners still to be read from `lines` after
/// the first (the P4Runtime address).
pub struct Served {
    pub child: Child,
    pub lines: Lines<BufReader<ChildStdout>>,
    pub p4runtime: String,
}

/// Starts the binary with `args` and reads its P4Runtime address.
pub fn serve(args: &[&str]) -> Served {
    let mut child = Command::new(BIN)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let p4runtime = first
        .strip_prefix("p4runtime listening on ")
        .unwrap()
        .to_string();
    Served {
        child,
        lines,
        p4runtime,
    }
}

impl Served {
    /// The next line the binary prints.
    pub fn line(&mut self) -> String {
        self.lines.next().unwrap().unwrap()
    }

    /// SIGTERM: the binary stops and exits successfully.
    pub fn terminate(mut self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let exit = self.child.wait().unwrap();
        assert!(exit.success(), "{exit:?}");
    }
}
