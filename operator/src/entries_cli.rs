//! `p4fleet entries validate | fmt | convert | export`: the entry tools for
//! a GitOps repository's CI and for reading a device back. Every check is
//! the model's (`p4fleet_model::entries`), the same code the TableEntrySet
//! controller parses with, so a file that passes here parses there.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use p4fleet_client::{Device, Identity, Target};
use p4fleet_model::entries::convert::{self, Converted};
use p4fleet_model::entries::{
    Entry, EntryError, ParseOptions, Style, TableSchema, format_entries, format_key,
    parse_text_lossy_with,
};
use p4fleet_model::sync;
use p4fleet_proto::p4info::{self, P4Info};

use crate::cli::{ConvertFrom, EntriesCommand, EntriesFiles, ExportProtocol, TextStyle};

/// What stops a command before it can judge its input (exit code 2); bad
/// entries are findings (exit code 1), printed as they are found.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a P4Info in protobuf text format: {reason}")]
    P4Info { path: PathBuf, reason: String },
    #[error("{0}")]
    Schema(EntryError),
    #[error("{0}")]
    Device(#[from] p4fleet_client::Error),
    #[error("the device did not answer within {0:?}")]
    Timeout(Duration),
    #[error("entry read back from the device: {0}")]
    ReadBack(EntryError),
    #[error("writing output: {0}")]
    Output(std::io::Error),
}

/// How a command ended: clean, or with findings already printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Clean,
    Findings,
}

/// Runs one `entries` subcommand; results on `out`, findings on `diag`.
pub fn run(
    cmd: EntriesCommand,
    out: &mut dyn Write,
    diag: &mut dyn Write,
) -> Result<Outcome, Error> {
    match cmd {
        EntriesCommand::Validate(files) => validate(&files, out, diag),
        EntriesCommand::Fmt {
            files,
            check,
            style,
        } => fmt(&files, check, style.into(), out, diag),
        EntriesCommand::Convert {
            p4info,
            from,
            table,
            style,
            mask_host_bits,
            files,
        } => {
            let p4info = read_p4info(&p4info)?;
            let options = ParseOptions { mask_host_bits };
            let job = Convert {
                p4info: &p4info,
                from,
                table: table.as_deref(),
                style: style.into(),
                options,
            };
            job.run(&files, out, diag)
        }
        EntriesCommand::Export {
            p4info,
            table,
            protocol,
            program,
            client_id,
            address,
            device_id,
            timeout_seconds,
            style,
        } => {
            let info = read_p4info(&p4info)?;
            let schema = TableSchema::from_p4info(&info, &table).map_err(Error::Schema)?;
            let source = Source {
                address: &address,
                device_id,
                protocol,
                program: program.as_deref(),
                client_id,
                p4info: &info,
            };
            let timeout = Duration::from_secs(timeout_seconds);
            let entries = crate::cli::block_on(async {
                tokio::time::timeout(timeout, export(&schema, source))
                    .await
                    .map_err(|_| Error::Timeout(timeout))?
            })
            .map_err(Error::Output)??;
            let text = format_entries(&schema, &entries, style.into()).map_err(Error::ReadBack)?;
            out.write_all(text.as_bytes()).map_err(Error::Output)?;
            Ok(Outcome::Clean)
        }
    }
}

impl From<TextStyle> for Style {
    fn from(s: TextStyle) -> Style {
        match s {
            TextStyle::Compact => Style::Compact,
            TextStyle::Named => Style::Named,
        }
    }
}

fn read(path: &Path) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn read_p4info(path: &Path) -> Result<P4Info, Error> {
    p4info::parse_text(&read(path)?).map_err(|e| Error::P4Info {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// `FILE:LINE: reason`, or `FILE: reason` for an error of no line.
fn finding(diag: &mut dyn Write, path: &Path, e: &EntryError) -> Result<(), Error> {
    let r = match e.line() {
        Some(line) => writeln!(diag, "{}:{line}: {}", path.display(), e.reason()),
        None => writeln!(diag, "{}: {e}", path.display()),
    };
    r.map_err(Error::Output)
}

/// The schema of a file's table: `--table`, else its `#! table` header.
fn schema_of(p4info: &P4Info, table: Option<&str>, text: &str) -> Result<TableSchema, EntryError> {
    let name = table
        .or_else(|| convert::table_header(text))
        .ok_or_else(|| {
            EntryError::Syntax("no table: give --table or a `#! table NAME` header".into())
        })?;
    TableSchema::from_p4info(p4info, name)
}

impl EntriesFiles {
    /// How leniently the files are read.
    fn options(&self) -> ParseOptions {
        ParseOptions {
            mask_host_bits: self.mask_host_bits,
        }
    }
}

/// Runs `file` on each file of `args` with the P4Info, the file's path
/// and its text: Findings when it found something in any (`Ok(false)`).
fn each_file(
    args: &EntriesFiles,
    mut file: impl FnMut(&P4Info, &Path, String) -> Result<bool, Error>,
) -> Result<Outcome, Error> {
    let p4info = read_p4info(&args.p4info)?;
    let mut outcome = Outcome::Clean;
    for path in &args.files {
        if !file(&p4info, path, read(path)?)? {
            outcome = Outcome::Findings;
        }
    }
    Ok(outcome)
}

fn validate(
    args: &EntriesFiles,
    out: &mut dyn Write,
    diag: &mut dyn Write,
) -> Result<Outcome, Error> {
    each_file(args, |p4info, path, text| {
        let schema = match schema_of(p4info, args.table.as_deref(), &text) {
            Ok(s) => s,
            Err(e) => {
                finding(diag, path, &e)?;
                return Ok(false);
            }
        };
        let report = parse_text_lossy_with(&schema, &text, usize::MAX, args.options());
        for e in &report.errors {
            finding(diag, path, e)?;
        }
        writeln!(
            out,
            "{}: {} {} for {}, {} invalid",
            path.display(),
            report.entries.len(),
            if report.entries.len() == 1 {
                "entry"
            } else {
                "entries"
            },
            schema.name,
            report.failed
        )
        .map_err(Error::Output)?;
        Ok(report.failed == 0)
    })
}

fn fmt(
    args: &EntriesFiles,
    check: bool,
    style: Style,
    out: &mut dyn Write,
    diag: &mut dyn Write,
) -> Result<Outcome, Error> {
    each_file(args, |p4info, path, text| {
        let formatted = schema_of(p4info, args.table.as_deref(), &text).and_then(|schema| {
            let mut report = parse_text_lossy_with(&schema, &text, 1, args.options());
            match report.errors.pop() {
                Some(e) => Err(e),
                // The formatter writes entries only: it would drop them.
                None if report.meters > 0 => Err(EntryError::Unsupported(
                    "fmt does not keep `@meter=` tokens yet; the file is left as it is".into(),
                )),
                None => format_entries(&schema, &report.entries, style),
            }
        });
        let formatted = match formatted {
            Ok(f) => f,
            Err(e) => {
                finding(diag, path, &e)?;
                return Ok(false);
            }
        };
        if formatted == text {
            return Ok(true);
        }
        if check {
            writeln!(out, "{}: not in canonical form", path.display()).map_err(Error::Output)?;
            return Ok(false);
        }
        std::fs::write(path, formatted).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        writeln!(out, "{}: formatted", path.display()).map_err(Error::Output)?;
        Ok(true)
    })
}

struct Convert<'a> {
    p4info: &'a P4Info,
    from: ConvertFrom,
    table: Option<&'a str>,
    style: Style,
    options: ParseOptions,
}

impl Convert<'_> {
    fn run(
        &self,
        files: &[PathBuf],
        out: &mut dyn Write,
        diag: &mut dyn Write,
    ) -> Result<Outcome, Error> {
        let Convert {
            p4info,
            from,
            table,
            style,
            options,
        } = *self;
        let only = table
            .map(|t| TableSchema::from_p4info(p4info, t))
            .transpose()
            .map_err(Error::Schema)?;
        let mut all = Converted::default();
        let mut outcome = Outcome::Clean;
        for path in files {
            let text = read(path)?;
            let converted = match from {
                ConvertFrom::SimpleSwitchCli => {
                    convert::from_simple_switch_cli(p4info, &text, options)
                }
                ConvertFrom::RuntimeJson => convert::from_runtime_json(p4info, &text, options),
            };
            let c = match converted {
                Ok(c) => c,
                Err(e) => {
                    finding(diag, path, &e)?;
                    outcome = Outcome::Findings;
                    continue;
                }
            };
            for s in &c.skipped {
                let at = match from {
                    ConvertFrom::SimpleSwitchCli => format!("{}:{}", path.display(), s.at),
                    ConvertFrom::RuntimeJson => {
                        format!("{}: table_entries[{}]", path.display(), s.at)
                    }
                };
                writeln!(diag, "{at}: skipped {}", s.what).map_err(Error::Output)?;
            }
            for (schema, entries) in c.tables {
                match all.tables.iter_mut().find(|(s, _)| s.id == schema.id) {
                    Some((_, es)) => es.extend(entries),
                    None => all.tables.push((schema, entries)),
                }
            }
        }
        if outcome == Outcome::Findings {
            return Ok(outcome);
        }
        let mut first = true;
        for (schema, entries) in &all.tables {
            if only.as_ref().is_some_and(|o| o.id != schema.id) {
                continue;
            }
            // Duplicates (also across files) are errors, as in a set.
            for (_, dup) in sync::duplicates(entries) {
                let key = format_key(schema, &entries[dup].key);
                writeln!(diag, "{}: duplicate entry {key}", schema.name).map_err(Error::Output)?;
                outcome = Outcome::Findings;
            }
            let text = format_entries(schema, entries, style).map_err(Error::Schema)?;
            if !first {
                out.write_all(b"\n").map_err(Error::Output)?;
            }
            first = false;
            out.write_all(text.as_bytes()).map_err(Error::Output)?;
        }
        Ok(outcome)
    }
}

/// Where `export` reads from.
struct Source<'a> {
    address: &'a str,
    device_id: u64,
    protocol: ExportProtocol,
    /// BFRT: the program (default: the device's only one).
    program: Option<&'a str>,
    /// BFRT: this reader's client id.
    client_id: u32,
    /// BFRT: maps the device's bfrt.json onto P4Info tables.
    p4info: &'a P4Info,
}

/// Reads the table back. P4Runtime: a Read needs no arbitration, so this
/// never competes with the operator for primary. BFRT: a Read needs a
/// subscribed client bound to the program, so this one subscribes under
/// its own client id and binds to the program the device runs (its
/// bfrt.json comes from the device); entries come back in P4Runtime form.
async fn export(schema: &TableSchema, src: Source<'_>) -> Result<Vec<Entry>, Error> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let target = match src.protocol {
        ExportProtocol::P4runtime => Target::p4runtime(src.address, src.device_id),
        ExportProtocol::Bfrt => Target::bfrt(src.address, src.device_id),
    };
    let identity = Identity {
        election_id: 0,
        client_id: src.client_id,
    };
    let device = Device::connect(target, identity)?;
    if let Device::Bfrt(d) = &device {
        d.attach(0, src.p4info, src.program).await?;
    }
    let read = device.read_table(0, schema.id).await?;
    let mut entries = read
        .iter()
        .filter(|t| !t.is_default_action)
        .map(|t| Entry::from_proto(schema, t))
        .collect::<Result<Vec<_>, _>>()
        .map_err(Error::ReadBack)?;
    entries.sort();
    Ok(entries)
}
