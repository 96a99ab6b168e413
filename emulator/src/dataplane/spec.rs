//! Loader for the subset of DPDK SWX pipeline specifications (`.spec`, what
//! p4c-dpdk writes) that the emulated DPDK target executes: struct, header
//! and metadata declarations, actions, tables and the `apply` block, compiled
//! into an instruction list with every name resolved to an index and every
//! header field to a byte offset. Pure: text in, [`Program`] or a
//! [`SpecError`] naming the line out.
//!
//! Supported instructions: `rx`, `extract`, `emit`, `mov` (header field,
//! metadata, action argument `t.x`, immediate; in the `apply` block also an
//! extern function's mailbox field `f.NAME.w0` / `f.NAME.w1`), `jmp`, `jmpeq`, `jmpneq`,
//! `jmpv`, `jmpnv` with `LABEL :` labels, `table`, `extern f.NAME`, `tx`,
//! `drop`, and `return` in actions. Anything else is refused with
//! [`SpecErrorKind::Unsupported`].

use std::collections::HashMap;

/// Most headers a program may declare (bits of the validity mask).
pub const MAX_HEADERS: usize = 8;
/// Most metadata fields (one 64-bit slot each in the packet descriptor).
pub const MAX_META: usize = 16;
/// Most arguments of one action.
pub const MAX_ARGS: usize = 4;
/// Widest table key, all fields together (bits).
pub const MAX_KEY_BITS: u32 = 128;
/// Most tables / actions (indices are `u8`).
pub const MAX_OBJECTS: usize = 255;
/// Most extern functions one program calls (each has a mailbox in the
/// packet descriptor; the target implements fewer anyway).
pub const MAX_EXTERNS: usize = 8;

/// Why a `.spec` does not load: the line (1-based) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {kind}")]
pub struct SpecError {
    pub line: usize,
    pub kind: SpecErrorKind,
}

/// The kind of [`SpecError`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecErrorKind {
    /// Valid SWX this emulator does not execute.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// Not SWX syntax.
    #[error("syntax: {0}")]
    Syntax(String),
    /// A reference to something not declared.
    #[error("undefined {what} {name:?}")]
    Undefined { what: &'static str, name: String },
    /// A name declared twice.
    #[error("duplicate {what} {name:?}")]
    Duplicate { what: &'static str, name: String },
    /// Over one of this module's limits (`MAX_*`).
    #[error("limit: {0}")]
    Limit(String),
}

fn err<T>(line: usize, kind: SpecErrorKind) -> Result<T, SpecError> {
    Err(SpecError { line, kind })
}

fn undefined(line: usize, what: &'static str, name: &str) -> SpecError {
    let name = name.to_string();
    SpecError {
        line,
        kind: SpecErrorKind::Undefined { what, name },
    }
}

fn unsupported<T>(line: usize, what: impl Into<String>) -> Result<T, SpecError> {
    err(line, SpecErrorKind::Unsupported(what.into()))
}

fn syntax<T>(line: usize, what: impl Into<String>) -> Result<T, SpecError> {
    err(line, SpecErrorKind::Syntax(what.into()))
}

/// A header field: where it is inside its header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldDef {
    pub name: String,
    /// Byte offset inside the header.
    pub offset: u16,
    /// Width in bytes (1..=8).
    pub bytes: u8,
}

/// A declared header instance (`header NAME instanceof T`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderDef {
    pub name: String,
    /// Size on the wire in bytes.
    pub size: u16,
    pub fields: Vec<FieldDef>,
}

/// A value source or destination, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operand {
    /// Field of a header: big-endian bytes in the packet.
    Header { hdr: u8, offset: u16, bytes: u8 },
    /// Metadata slot.
    Meta(u8),
    /// Action argument (only inside actions).
    Arg(u8),
    /// Word `word` (0 = `w0`, 1 = `w1`) of extern `ext`'s mailbox (only in
    /// the `apply` block's `mov`).
    Mailbox { ext: u8, word: u8 },
    /// Immediate.
    Imm(u64),
}

/// One instruction of the `apply` block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Writes the input port into a metadata slot.
    Rx {
        meta: u8,
    },
    /// Binds the header at the parse cursor and advances it.
    Extract {
        hdr: u8,
    },
    Mov {
        dst: Operand,
        src: Operand,
    },
    Jmp {
        target: u16,
    },
    JmpEq {
        target: u16,
        a: Operand,
        b: Operand,
    },
    JmpNeq {
        target: u16,
        a: Operand,
        b: Operand,
    },
    JmpValid {
        target: u16,
        hdr: u8,
    },
    JmpInvalid {
        target: u16,
        hdr: u8,
    },
    Table {
        table: u8,
    },
    Extern {
        ext: u8,
    },
    /// Sends the packet to the port in a metadata slot; ends the packet.
    Tx {
        meta: u8,
    },
    /// Ends the packet, dropped.
    Drop,
}

/// One instruction of an action body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActionOp {
    Mov {
        dst: Operand,
        src: Operand,
    },
    /// Marks the packet dropped; it ends when the action returns.
    Drop,
}

/// A declared action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionDef {
    pub name: String,
    /// Argument names and widths in bits, in order.
    pub args: Vec<(String, u32)>,
    pub ops: Vec<ActionOp>,
}

/// Match kind of a key field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchKind {
    Exact,
    Lpm,
    /// SWX `wildcard` (P4 ternary / optional).
    Wildcard,
}

/// A table key field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyField {
    pub name: String,
    pub src: Operand,
    pub bits: u32,
    pub kind: MatchKind,
}

/// A declared table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableDef {
    pub name: String,
    pub keys: Vec<KeyField>,
    /// Action indices the table may run.
    pub actions: Vec<u8>,
    /// Default action index and its argument values.
    pub default_action: u8,
    pub default_args: Vec<u64>,
    pub default_const: bool,
    pub size: u32,
}

impl TableDef {
    /// Total key width in bits.
    pub fn key_bits(&self) -> u32 {
        self.keys.iter().map(|k| k.bits).sum()
    }
}

/// A compiled pipeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    pub headers: Vec<HeaderDef>,
    /// Metadata field names and widths (bits), slot = index.
    pub meta: Vec<(String, u32)>,
    pub actions: Vec<ActionDef>,
    pub tables: Vec<TableDef>,
    /// Extern function names, index = `Op::Extern::ext`.
    pub externs: Vec<String>,
    /// The `apply` block.
    pub ops: Vec<Op>,
}

impl Program {
    pub fn table_index(&self, name: &str) -> Option<usize> {
        self.tables.iter().position(|t| t.name == name)
    }
    pub fn action_index(&self, name: &str) -> Option<usize> {
        self.actions.iter().position(|a| a.name == name)
    }
    pub fn extern_index(&self, name: &str) -> Option<usize> {
        self.externs.iter().position(|e| e == name)
    }
}

#[derive(Debug, Clone)]
struct StructDef {
    fields: Vec<(String, u32)>,
}

/// Lines of a block after its opening line, up to the closing `}`.
struct Block<'a> {
    start: usize,
    lines: Vec<(usize, Vec<&'a str>)>,
}

/// Splits into (line number, tokens), dropping comments (`;`, `//`) and
/// blank lines.
fn tokenize(text: &str) -> Vec<(usize, Vec<&str>)> {
    text.lines()
        .enumerate()
        .filter_map(|(i, l)| {
            let l = l.split(';').next().unwrap_or("");
            let l = l.split("//").next().unwrap_or("");
            let toks: Vec<&str> = l.split_whitespace().collect();
            (!toks.is_empty()).then_some((i + 1, toks))
        })
        .collect()
}

fn parse_number(line: usize, s: &str) -> Result<u64, SpecError> {
    let r = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(h, 16)
    } else {
        s.parse::<u64>()
    };
    r.or_else(|_| syntax(line, format!("{s:?} is not a number")))
}

fn parse_width(line: usize, s: &str) -> Result<u32, SpecError> {
    let Some(inner) = s.strip_prefix("bit<").and_then(|r| r.strip_suffix('>')) else {
        if s.starts_with("varbit<") {
            return unsupported(line, "varbit fields");
        }
        return syntax(line, format!("expected bit<N>, got {s:?}"));
    };
    let w = parse_number(line, inner)? as u32;
    if w == 0 || w > 64 {
        return err(
            line,
            SpecErrorKind::Limit(format!("field width {w} (1..=64 bits)")),
        );
    }
    Ok(w)
}

/// Loads a `.spec`.
pub fn load(text: &str) -> Result<Program, SpecError> {
    let toks = tokenize(text);
    let mut structs: HashMap<&str, StructDef> = HashMap::new();
    let mut meta_struct: Option<(usize, &str)> = None;
    let mut header_decls: Vec<(usize, &str, &str)> = Vec::new();
    let mut action_blocks: Vec<(usize, &str, Option<&str>, Block)> = Vec::new();
    let mut table_blocks: Vec<(usize, &str, Block)> = Vec::new();
    let mut apply_block: Option<Block> = None;

    let mut i = 0;
    while i < toks.len() {
        let (line, t) = &toks[i];
        let line = *line;
        match t[0] {
            "struct" => {
                let [_, name, "{"] = t[..] else {
                    return syntax(line, "expected `struct NAME {`");
                };
                let (block, next) = take_block(&toks, i)?;
                i = next;
                let mut fields = Vec::new();
                for (l, ft) in &block.lines {
                    let [ty, fname] = ft[..] else {
                        return syntax(*l, "expected `bit<N> NAME`");
                    };
                    fields.push((fname.to_string(), parse_width(*l, ty)?));
                }
                if structs.insert(name, StructDef { fields }).is_some() {
                    return err(
                        line,
                        SpecErrorKind::Duplicate {
                            what: "struct",
                            name: name.into(),
                        },
                    );
                }
                continue;
            }
            "header" => {
                let [_, name, "instanceof", ty] = t[..] else {
                    return syntax(line, "expected `header NAME instanceof TYPE`");
                };
                header_decls.push((line, name, ty));
            }
            "metadata" => {
                let [_, "instanceof", ty] = t[..] else {
                    return syntax(line, "expected `metadata instanceof TYPE`");
                };
                meta_struct = Some((line, ty));
            }
            "action" => {
                let args = match t[..] {
                    [_, _, "args", "none", "{"] => None,
                    [_, _, "args", "instanceof", ty, "{"] => Some(ty),
                    _ => {
                        return syntax(
                            line,
                            "expected `action NAME args none {` or `action NAME args instanceof T {`",
                        );
                    }
                };
                let (block, next) = take_block(&toks, i)?;
                i = next;
                action_blocks.push((line, t[1], args, block));
                continue;
            }
            "table" => {
                let [_, name, "{"] = t[..] else {
                    return syntax(line, "expected `table NAME {`");
                };
                let (block, next) = take_block(&toks, i)?;
                i = next;
                table_blocks.push((line, name, block));
                continue;
            }
            "apply" => {
                if t[..] != ["apply", "{"] {
                    return syntax(line, "expected `apply {`");
                }
                if apply_block.is_some() {
                    return err(
                        line,
                        SpecErrorKind::Duplicate {
                            what: "block",
                            name: "apply".into(),
                        },
                    );
                }
                let (block, next) = take_block(&toks, i)?;
                i = next;
                apply_block = Some(block);
                continue;
            }
            other @ ("extobj" | "learner" | "selector" | "regarray" | "metarray" | "hash"
            | "rss") => {
                return unsupported(line, format!("`{other}` declarations"));
            }
            other => return syntax(line, format!("unexpected `{other}` at top level")),
        }
        i += 1;
    }

    // Headers.
    let mut headers = Vec::new();
    for (line, name, ty) in &header_decls {
        if headers.len() == MAX_HEADERS {
            return err(
                *line,
                SpecErrorKind::Limit(format!("at most {MAX_HEADERS} headers")),
            );
        }
        let st = structs
            .get(ty)
            .ok_or_else(|| undefined(*line, "struct", ty))?;
        let mut fields = Vec::new();
        let mut off = 0u32;
        for (f, w) in &st.fields {
            if w % 8 != 0 {
                return unsupported(
                    *line,
                    format!("header field {name}.{f} of {w} bits (whole bytes only)"),
                );
            }
            fields.push(FieldDef {
                name: f.clone(),
                offset: off as u16,
                bytes: (w / 8) as u8,
            });
            off += w / 8;
        }
        if headers.iter().any(|h: &HeaderDef| h.name == *name) {
            return err(
                *line,
                SpecErrorKind::Duplicate {
                    what: "header",
                    name: name.to_string(),
                },
            );
        }
        headers.push(HeaderDef {
            name: name.to_string(),
            size: off as u16,
            fields,
        });
    }

    // Metadata.
    let mut meta = Vec::new();
    if let Some((line, ty)) = meta_struct {
        let st = structs
            .get(ty)
            .ok_or_else(|| undefined(line, "struct", ty))?;
        if st.fields.len() > MAX_META {
            return err(
                line,
                SpecErrorKind::Limit(format!("at most {MAX_META} metadata fields")),
            );
        }
        meta = st.fields.clone();
    }

    let scope = Scope {
        headers: &headers,
        meta: &meta,
    };

    // Actions.
    let mut actions: Vec<ActionDef> = Vec::new();
    for (line, name, args_ty, block) in &action_blocks {
        if actions.iter().any(|a| a.name == *name) {
            return err(
                *line,
                SpecErrorKind::Duplicate {
                    what: "action",
                    name: name.to_string(),
                },
            );
        }
        let args = match args_ty {
            None => Vec::new(),
            Some(ty) => structs
                .get(ty)
                .ok_or_else(|| undefined(*line, "struct", ty))?
                .fields
                .clone(),
        };
        if args.len() > MAX_ARGS {
            return err(
                *line,
                SpecErrorKind::Limit(format!("at most {MAX_ARGS} action arguments")),
            );
        }
        let mut ops = Vec::new();
        let mut returned = false;
        for (l, it) in &block.lines {
            if returned {
                return unsupported(*l, "instructions after `return`");
            }
            match it[..] {
                ["return"] => returned = true,
                ["drop"] => ops.push(ActionOp::Drop),
                ["mov", dst, src] => {
                    let dst = scope.operand(*l, dst, Some(&args))?;
                    check_dst(*l, dst)?;
                    let src = scope.operand(*l, src, Some(&args))?;
                    ops.push(ActionOp::Mov { dst, src });
                }
                _ => return unsupported(*l, format!("action instruction `{}`", it.join(" "))),
            }
        }
        actions.push(ActionDef {
            name: name.to_string(),
            args,
            ops,
        });
    }
    if actions.len() > MAX_OBJECTS {
        return err(
            action_blocks[MAX_OBJECTS].0,
            SpecErrorKind::Limit(format!("at most {MAX_OBJECTS} actions")),
        );
    }

    // Tables.
    let mut tables: Vec<TableDef> = Vec::new();
    for (line, name, block) in &table_blocks {
        if tables.iter().any(|t| t.name == *name) {
            return err(
                *line,
                SpecErrorKind::Duplicate {
                    what: "table",
                    name: name.to_string(),
                },
            );
        }
        tables.push(compile_table(*line, name, block, &scope, &actions)?);
    }
    if tables.len() > MAX_OBJECTS {
        return err(
            table_blocks[MAX_OBJECTS].0,
            SpecErrorKind::Limit(format!("at most {MAX_OBJECTS} tables")),
        );
    }

    let Some(apply) = apply_block else {
        return syntax(toks.last().map(|t| t.0).unwrap_or(1), "no `apply` block");
    };
    let (ops, externs) = compile_apply(&apply, &scope, &tables)?;
    Ok(Program {
        headers,
        meta,
        actions,
        tables,
        externs,
        ops,
    })
}

/// The block opened on `toks[open]` (whose last token is `{`); nested
/// blocks (a table's `key {` / `actions {`) are kept as lines. Returns the
/// index after the closing `}`.
fn take_block<'a>(
    toks: &[(usize, Vec<&'a str>)],
    open: usize,
) -> Result<(Block<'a>, usize), SpecError> {
    let start = toks[open].0;
    let mut depth = 1;
    let mut lines = Vec::new();
    let mut i = open + 1;
    while i < toks.len() {
        let (l, t) = &toks[i];
        if t[..] == ["}"] {
            depth -= 1;
            if depth == 0 {
                return Ok((Block { start, lines }, i + 1));
            }
        } else if t.last() == Some(&"{") {
            depth += 1;
        }
        lines.push((*l, t.clone()));
        i += 1;
    }
    syntax(start, "block is not closed")
}

struct Scope<'a> {
    headers: &'a [HeaderDef],
    meta: &'a [(String, u32)],
}

fn check_dst(line: usize, dst: Operand) -> Result<(), SpecError> {
    match dst {
        Operand::Header { .. } | Operand::Meta(_) | Operand::Mailbox { .. } => Ok(()),
        _ => syntax(line, "destination must be a header field or metadata"),
    }
}

/// Resolves `f.NAME.FIELD`, a field of extern function NAME's mailbox
/// (`None`: not an `f.` operand). NAME must be an extern the program
/// calls (`externs`); `p4fleet_state` is the target's own word: never
/// written by a program, and read it is always idle (0) whenever the
/// program runs (the agent sets it back before a call returns done).
fn mailbox(
    line: usize,
    s: &str,
    externs: &[String],
    write: bool,
) -> Result<Option<Operand>, SpecError> {
    let Some(rest) = s.strip_prefix("f.") else {
        return Ok(None);
    };
    let Some((name, field)) = rest.split_once('.') else {
        return syntax(line, format!("{s:?}: expected f.EXTERN.FIELD"));
    };
    let Some(ext) = externs.iter().position(|e| e == name) else {
        return Err(undefined(
            line,
            "extern function (no `extern f.NAME` calls it)",
            name,
        ));
    };
    match field {
        "w0" | "w1" => Ok(Some(Operand::Mailbox {
            ext: ext as u8,
            word: u8::from(field == "w1"),
        })),
        "p4fleet_state" if write => unsupported(
            line,
            format!("{s}: p4fleet_state is the target's own state; a program must not write it"),
        ),
        "p4fleet_state" => Ok(Some(Operand::Imm(0))),
        _ => err(
            line,
            SpecErrorKind::Undefined {
                what: "mailbox field (w0, w1)",
                name: s.to_string(),
            },
        ),
    }
}

impl Scope<'_> {
    /// Resolves `h.hdr.field`, `m.field`, `t.arg` or an immediate.
    fn operand(
        &self,
        line: usize,
        s: &str,
        args: Option<&[(String, u32)]>,
    ) -> Result<Operand, SpecError> {
        if let Some(rest) = s.strip_prefix("h.") {
            let Some((h, f)) = rest.split_once('.') else {
                return syntax(line, format!("{s:?}: expected h.HEADER.FIELD"));
            };
            let (hi, hdr) = self.header(line, h)?;
            let field = hdr
                .fields
                .iter()
                .find(|x| x.name == f)
                .ok_or_else(|| undefined(line, "header field", s))?;
            return Ok(Operand::Header {
                hdr: hi,
                offset: field.offset,
                bytes: field.bytes,
            });
        }
        if let Some(f) = s.strip_prefix("m.") {
            let i = self
                .meta
                .iter()
                .position(|(n, _)| n == f)
                .ok_or_else(|| undefined(line, "metadata field", s))?;
            return Ok(Operand::Meta(i as u8));
        }
        if let Some(a) = s.strip_prefix("t.") {
            let Some(args) = args else {
                return syntax(line, format!("{s:?}: action arguments only inside actions"));
            };
            let i = args
                .iter()
                .position(|(n, _)| n == a)
                .ok_or_else(|| undefined(line, "action argument", s))?;
            return Ok(Operand::Arg(i as u8));
        }
        if s.starts_with("e.") {
            return unsupported(line, format!("{s:?}: extern object mailboxes"));
        }
        if s.starts_with("f.") {
            return unsupported(
                line,
                format!("{s:?}: extern function mailboxes only in the apply block's mov"),
            );
        }
        if s.starts_with(|c: char| c.is_ascii_digit()) {
            return Ok(Operand::Imm(parse_number(line, s)?));
        }
        syntax(
            line,
            format!("{s:?} is not an operand (h.*, m.*, t.*, number)"),
        )
    }

    fn header(&self, line: usize, name: &str) -> Result<(u8, &HeaderDef), SpecError> {
        self.headers
            .iter()
            .enumerate()
            .find(|(_, h)| h.name == name)
            .map(|(i, h)| (i as u8, h))
            .ok_or_else(|| undefined(line, "header", name))
    }

    /// `h.NAME` as a header index.
    fn header_ref(&self, line: usize, s: &str) -> Result<u8, SpecError> {
        let Some(name) = s.strip_prefix("h.") else {
            return syntax(line, format!("{s:?}: expected h.HEADER"));
        };
        Ok(self.header(line, name)?.0)
    }

    fn width(&self, op: Operand) -> u32 {
        match op {
            Operand::Header { bytes, .. } => bytes as u32 * 8,
            Operand::Meta(i) => self.meta[i as usize].1,
            Operand::Mailbox { .. } | Operand::Arg(_) | Operand::Imm(_) => 64,
        }
    }
}

fn compile_table(
    line: usize,
    name: &str,
    block: &Block,
    scope: &Scope,
    actions: &[ActionDef],
) -> Result<TableDef, SpecError> {
    let mut keys = Vec::new();
    let mut acts = Vec::new();
    let mut default = None;
    let mut size = 0u32;
    let mut section: Option<&str> = None;
    for (l, t) in &block.lines {
        match (section, &t[..]) {
            (None, ["key", "{"]) => section = Some("key"),
            (None, ["actions", "{"]) => section = Some("actions"),
            (Some(_), ["}"]) => section = None,
            (Some("key"), [field, kind]) => {
                let kind = match *kind {
                    "exact" => MatchKind::Exact,
                    "lpm" => MatchKind::Lpm,
                    "wildcard" => MatchKind::Wildcard,
                    other => return unsupported(*l, format!("match kind {other:?}")),
                };
                let src = scope.operand(*l, field, None)?;
                if matches!(src, Operand::Imm(_)) {
                    return syntax(*l, "a key field must be a header or metadata field");
                }
                keys.push(KeyField {
                    name: field.to_string(),
                    src,
                    bits: scope.width(src),
                    kind,
                });
            }
            (Some("actions"), [a, rest @ ..]) => {
                if rest
                    .iter()
                    .any(|r| !matches!(*r, "@tableonly" | "@defaultonly"))
                {
                    return syntax(*l, format!("unexpected {rest:?} after action {a}"));
                }
                let ai = actions
                    .iter()
                    .position(|x| x.name == *a)
                    .ok_or_else(|| undefined(*l, "action", a))?;
                acts.push(ai as u8);
            }
            (None, ["default_action", a, "args", rest @ ..]) => {
                let ai = actions
                    .iter()
                    .position(|x| x.name == *a)
                    .ok_or_else(|| undefined(*l, "action", a))?;
                let (rest, is_const) = match rest {
                    [r @ .., "const"] => (r, true),
                    r => (r, false),
                };
                let def = &actions[ai];
                let args = match rest {
                    ["none"] if def.args.is_empty() => Vec::new(),
                    ["none"] => {
                        return syntax(
                            *l,
                            format!("action {a} needs {} argument(s)", def.args.len()),
                        );
                    }
                    pairs if pairs.len() == 2 * def.args.len() => {
                        let mut v = Vec::new();
                        for ((n, _), p) in def.args.iter().zip(pairs.chunks(2)) {
                            if p[0] != n {
                                return syntax(*l, format!("expected argument {n}, got {}", p[0]));
                            }
                            v.push(parse_number(*l, p[1])?);
                        }
                        v
                    }
                    _ => return syntax(*l, "expected `args none` or `args NAME VALUE ...`"),
                };
                default = Some((ai as u8, args, is_const));
            }
            (None, ["size", n]) => size = parse_number(*l, n)? as u32,
            (None, [kw, ..]) if matches!(*kw, "hash" | "instanceof" | "pragma") => {
                return unsupported(*l, format!("table `{kw}`"));
            }
            _ => return syntax(*l, format!("unexpected `{}` in table {name}", t.join(" "))),
        }
    }
    let bits: u32 = keys.iter().map(|k| k.bits).sum();
    if bits > MAX_KEY_BITS {
        return err(
            line,
            SpecErrorKind::Limit(format!(
                "table {name}: key of {bits} bits (at most {MAX_KEY_BITS})"
            )),
        );
    }
    let lpm = keys.iter().filter(|k| k.kind == MatchKind::Lpm).count();
    if lpm > 1 || (lpm == 1 && keys.iter().any(|k| k.kind == MatchKind::Wildcard)) {
        return unsupported(
            line,
            format!("table {name}: lpm with other lpm/wildcard fields"),
        );
    }
    let Some((default_action, default_args, default_const)) = default else {
        return syntax(line, format!("table {name} has no default_action"));
    };
    if !acts.contains(&default_action) {
        return syntax(
            line,
            format!(
                "table {name}: default action {} is not in its actions",
                actions[default_action as usize].name
            ),
        );
    }
    Ok(TableDef {
        name: name.to_string(),
        keys,
        actions: acts,
        default_action,
        default_args,
        default_const,
        size,
    })
}

fn compile_apply(
    block: &Block,
    scope: &Scope,
    tables: &[TableDef],
) -> Result<(Vec<Op>, Vec<String>), SpecError> {
    // Pass 1: labels -> instruction index (emit compiles to nothing, so
    // it does not take an index).
    let mut labels: HashMap<&str, u16> = HashMap::new();
    let mut body: Vec<(usize, &[&str])> = Vec::new();
    let mut externs: Vec<String> = Vec::new();
    let mut next_op = 0u16;
    for (l, t) in &block.lines {
        let mut t: &[&str] = t;
        let lbl = if t.len() >= 2 && t[1] == ":" {
            let n = t[0];
            t = &t[2..];
            Some(n)
        } else if let Some(n) = t[0].strip_suffix(':').filter(|s| !s.is_empty()) {
            t = &t[1..];
            Some(n)
        } else {
            None
        };
        if let Some(n) = lbl
            && labels.insert(n, next_op).is_some()
        {
            return err(
                *l,
                SpecErrorKind::Duplicate {
                    what: "label",
                    name: n.to_string(),
                },
            );
        }
        if t.is_empty() {
            return syntax(*l, "a label needs an instruction on its line");
        }
        if t[0] != "emit" {
            next_op += 1;
        }
        // Extern functions in order of their first call, so that a mailbox
        // operand can name one called further down.
        if let ["extern", target] = t
            && let Some(f) = target.strip_prefix("f.")
            && !externs.iter().any(|e| e == f)
        {
            if externs.len() == MAX_EXTERNS {
                return err(
                    *l,
                    SpecErrorKind::Limit(format!("at most {MAX_EXTERNS} extern functions")),
                );
            }
            externs.push(f.to_string());
        }
        body.push((*l, t));
    }
    let label = |l: usize, name: &str| -> Result<u16, SpecError> {
        labels
            .get(name)
            .copied()
            .ok_or_else(|| undefined(l, "label", name))
    };

    let mut ops = Vec::new();
    let mut op_lines = Vec::new();
    let mut extracted: Vec<u8> = Vec::new();
    let mut emitted: Vec<u8> = Vec::new();
    // The in-place packet model: headers stay where they were parsed, so
    // an emit that reorders or omits headers cannot be honoured.
    for (l, t) in &body {
        let l = *l;
        let op = match t[..] {
            ["rx", m] => match scope.operand(l, m, None)? {
                Operand::Meta(meta) => Op::Rx { meta },
                _ => return syntax(l, "rx needs a metadata field"),
            },
            ["tx", m] => match scope.operand(l, m, None)? {
                Operand::Meta(meta) => Op::Tx { meta },
                _ => return unsupported(l, "tx to a port that is not a metadata field"),
            },
            ["extract", h] => {
                let hdr = scope.header_ref(l, h)?;
                if extracted.contains(&hdr) {
                    return unsupported(l, format!("extracting {h} twice"));
                }
                extracted.push(hdr);
                Op::Extract { hdr }
            }
            ["emit", h] => {
                let hdr = scope.header_ref(l, h)?;
                emitted.push(hdr);
                if !extracted.starts_with(&emitted) {
                    return unsupported(
                        l,
                        format!(
                            "emit {h}: headers are emitted in place, so they must be emitted in the order they were extracted"
                        ),
                    );
                }
                continue;
            }
            ["mov", d, s] => {
                let dst = match mailbox(l, d, &externs, true)? {
                    Some(m) => m,
                    None => scope.operand(l, d, None)?,
                };
                check_dst(l, dst)?;
                let src = match mailbox(l, s, &externs, false)? {
                    Some(m) => m,
                    None => scope.operand(l, s, None)?,
                };
                Op::Mov { dst, src }
            }
            ["jmp", lbl] => Op::Jmp {
                target: label(l, lbl)?,
            },
            ["jmpeq", lbl, a, b] => Op::JmpEq {
                target: label(l, lbl)?,
                a: scope.operand(l, a, None)?,
                b: scope.operand(l, b, None)?,
            },
            ["jmpneq", lbl, a, b] => Op::JmpNeq {
                target: label(l, lbl)?,
                a: scope.operand(l, a, None)?,
                b: scope.operand(l, b, None)?,
            },
            ["jmpv", lbl, h] => Op::JmpValid {
                target: label(l, lbl)?,
                hdr: scope.header_ref(l, h)?,
            },
            ["jmpnv", lbl, h] => Op::JmpInvalid {
                target: label(l, lbl)?,
                hdr: scope.header_ref(l, h)?,
            },
            ["table", name] => {
                let table = tables
                    .iter()
                    .position(|t| t.name == name)
                    .ok_or_else(|| undefined(l, "table", name))?;
                Op::Table { table: table as u8 }
            }
            ["extern", target] => {
                let Some(f) = target.strip_prefix("f.") else {
                    return unsupported(
                        l,
                        format!("extern {target}: only extern functions (`extern f.NAME`)"),
                    );
                };
                let ext = externs
                    .iter()
                    .position(|e| e == f)
                    .expect("pass 1 collected every extern call");
                Op::Extern { ext: ext as u8 }
            }
            ["drop"] => Op::Drop,
            [other, ..] => return unsupported(l, format!("instruction `{other}`")),
            [] => unreachable!("tokenize drops empty lines"),
        };
        ops.push(op);
        op_lines.push(l);
    }
    match ops.last() {
        Some(Op::Tx { .. } | Op::Drop) => {}
        _ => return syntax(block.start, "the apply block must end with tx or drop"),
    }
    // Forward jumps only: every packet then ends in at most ops.len()
    // steps (p4c-dpdk's parsers and ifs only jump forward).
    for (i, op) in ops.iter().enumerate() {
        let target = match op {
            Op::Jmp { target }
            | Op::JmpEq { target, .. }
            | Op::JmpNeq { target, .. }
            | Op::JmpValid { target, .. }
            | Op::JmpInvalid { target, .. } => *target as usize,
            _ => continue,
        };
        if target <= i || target >= ops.len() {
            return unsupported(op_lines[i], "backward jump (loops are not executed)");
        }
    }
    if emitted.len() != extracted.len() {
        return unsupported(
            block.start,
            "every extracted header must be emitted (headers are emitted in place)",
        );
    }
    if ops.len() > u16::MAX as usize {
        return err(
            block.start,
            SpecErrorKind::Limit("too many instructions".into()),
        );
    }
    Ok((ops, externs))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::l2crypt::{MAILBOX_SPEC as MAILBOX, SPEC as L2CRYPT};

    #[test]
    fn loads_the_mailbox_variant() {
        let p = load(MAILBOX).unwrap();
        assert_eq!(p.externs, ["async_encrypt", "async_decrypt"]);
        let payload = Operand::Header {
            hdr: 3,
            offset: 8,
            bytes: 8,
        };
        let movs: Vec<_> = p
            .ops
            .iter()
            .filter_map(|o| match o {
                Op::Mov { dst, src } => Some((*dst, *src)),
                _ => None,
            })
            .collect();
        let mb = |ext, word| Operand::Mailbox { ext, word };
        // In: payload -> encrypt's mailbox; across: encrypt's -> decrypt's;
        // out: decrypt's -> payload.
        assert_eq!(movs[1], (mb(0, 1), payload));
        assert_eq!(movs[2], (mb(1, 0), mb(0, 0)));
        assert_eq!(movs[5], (payload, mb(1, 1)));
        assert_eq!(movs.len(), 6);
    }

    #[test]
    fn mailbox_operands_are_checked() {
        let call = "\textern f.async_encrypt\n\tdrop";
        // The target's state word: never written (the line named); read, 0.
        let e = refused_at(
            &with_apply(&format!("\tmov f.async_encrypt.p4fleet_state 1\n{call}")),
            "p4fleet_state",
        );
        assert!(matches!(e.kind, SpecErrorKind::Unsupported(_)), "{e}");
        assert!(e.to_string().contains("must not write"), "{e}");
        let text = with_apply(&format!(
            "\tmov m.standard_metadata_egress_spec f.async_encrypt.p4fleet_state\n{call}"
        ));
        let p = load(&text).unwrap();
        assert_eq!(
            p.ops[0],
            Op::Mov {
                dst: Operand::Meta(1),
                src: Operand::Imm(0)
            }
        );
        // A field the mailbox does not have, named.
        undefined_at(
            &format!("\tmov f.async_encrypt.w2 1\n{call}"),
            "w2",
            "f.async_encrypt.w2",
        );
        // An extern the program does not call, named.
        undefined_at(
            &format!("\tmov f.compress.w0 1\n{call}"),
            "f.compress",
            "compress",
        );
        // Only in the apply block's mov.
        let text =
            with_apply("\tjmpeq L f.async_encrypt.w0 1\n\tL : extern f.async_encrypt\n\tdrop");
        let e = load(&text).unwrap_err();
        assert!(matches!(e.kind, SpecErrorKind::Unsupported(_)), "{e}");
    }

    #[test]
    fn loads_the_l2crypt_example() {
        let p = load(L2CRYPT).unwrap();
        assert_eq!(
            p.headers
                .iter()
                .map(|h| (h.name.as_str(), h.size))
                .collect::<Vec<_>>(),
            [("ethernet", 14), ("vlan", 4), ("ipv4", 20)]
        );
        assert_eq!(p.externs, ["async_encrypt", "async_decrypt"]);
        assert_eq!(p.tables.len(), 2);
        let dmac = &p.tables[p.table_index("dmac").unwrap()];
        assert_eq!(dmac.key_bits(), 48);
        assert_eq!(
            dmac.keys[0].src,
            Operand::Header {
                hdr: 0,
                offset: 0,
                bytes: 6
            }
        );
        assert_eq!(p.actions[dmac.default_action as usize].name, "broadcast");
        let smac = &p.tables[p.table_index("smac").unwrap()];
        assert_eq!(
            smac.keys[0].src,
            Operand::Header {
                hdr: 0,
                offset: 6,
                bytes: 6
            }
        );
        let fwd = &p.actions[p.action_index("forward").unwrap()];
        assert_eq!(
            fwd.ops,
            [ActionOp::Mov {
                dst: Operand::Meta(1),
                src: Operand::Arg(0)
            }]
        );
        // The parser's jumps resolve to the extract of vlan / ipv4.
        assert_eq!(p.ops[0], Op::Rx { meta: 0 });
        assert_eq!(
            p.ops[2],
            Op::JmpEq {
                target: 5,
                a: Operand::Header {
                    hdr: 0,
                    offset: 12,
                    bytes: 2
                },
                b: Operand::Imm(0x8100)
            }
        );
        assert_eq!(p.ops[5], Op::Extract { hdr: 1 });
        assert_eq!(p.ops[8], Op::Extract { hdr: 2 });
        assert_eq!(p.ops[9], Op::Table { table: 0 });
        assert_eq!(p.ops[11], Op::Extern { ext: 0 });
        assert_eq!(*p.ops.last().unwrap(), Op::Tx { meta: 1 });
    }

    fn with_apply(body: &str) -> String {
        let head = L2CRYPT.split("apply {").next().unwrap();
        format!("{head}apply {{\n{body}\n}}\n")
    }

    /// Loads `text`, which must fail on the first line naming `needle`.
    fn refused_at(text: &str, needle: &str) -> SpecError {
        let e = load(text).unwrap_err();
        let line = text.lines().position(|l| l.contains(needle)).unwrap() + 1;
        assert_eq!(e.line, line, "{e}");
        e
    }

    /// `body` as l2crypt's apply block: refused as unsupported on the first
    /// line naming `needle`.
    fn unsupported_at(body: &str, needle: &str) -> SpecError {
        let e = refused_at(&with_apply(body), needle);
        assert!(matches!(e.kind, SpecErrorKind::Unsupported(_)), "{e}");
        e
    }

    /// `body` as l2crypt's apply block: refused on the first line naming
    /// `needle`, for naming `name`, which is not declared.
    fn undefined_at(body: &str, needle: &str, name: &str) {
        let e = refused_at(&with_apply(body), needle);
        assert!(
            matches!(&e.kind, SpecErrorKind::Undefined { name: n, .. } if n == name),
            "{e}"
        );
    }

    #[test]
    fn unsupported_instruction_names_its_line() {
        let e = unsupported_at(
            "\trx m.standard_metadata_ingress_port\n\tchecksum h.ipv4\n\tdrop",
            "checksum",
        );
        assert!(e.to_string().contains("checksum"), "{e}");
    }

    #[test]
    fn extern_objects_are_unsupported() {
        unsupported_at("\textern e.crypto.encrypt\n\tdrop", "e.crypto");
    }

    #[test]
    fn undefined_references() {
        let text = with_apply("\ttable nope\n\tdrop");
        let e = load(&text).unwrap_err();
        assert_eq!(
            e.kind,
            SpecErrorKind::Undefined {
                what: "table",
                name: "nope".into()
            }
        );
        let text = with_apply("\tjmp NOWHERE\n\tdrop");
        assert!(matches!(
            load(&text).unwrap_err().kind,
            SpecErrorKind::Undefined { what: "label", .. }
        ));
        refused_at(&with_apply("\tmov m.nope 1\n\tdrop"), "m.nope");
    }

    #[test]
    fn emit_out_of_order_is_refused() {
        unsupported_at(
            "\textract h.ethernet\n\textract h.ipv4\n\temit h.ipv4\n\tdrop",
            "emit h.ipv4",
        );
    }

    #[test]
    fn sub_byte_header_fields_are_unsupported() {
        let text =
            "struct t {\n\tbit<4> a\n\tbit<4> b\n}\nheader x instanceof t\napply {\n\tdrop\n}\n";
        let e = refused_at(text, "header x");
        assert_eq!(e.line, 5);
        assert!(matches!(e.kind, SpecErrorKind::Unsupported(_)));
    }

    #[test]
    fn backward_jumps_are_refused() {
        unsupported_at(
            "\tLOOP : extract h.ethernet\n\tjmp LOOP\n\tdrop",
            "jmp LOOP",
        );
    }

    #[test]
    fn apply_must_end_the_packet() {
        let text = with_apply("\textract h.ethernet");
        assert!(matches!(
            load(&text).unwrap_err().kind,
            SpecErrorKind::Syntax(_)
        ));
    }

    #[test]
    fn default_action_arguments() {
        let text = L2CRYPT.replace(
            "default_action broadcast args none",
            "default_action forward args port 7 const",
        );
        let p = load(&text).unwrap();
        let dmac = &p.tables[p.table_index("dmac").unwrap()];
        assert_eq!(dmac.default_args, [7]);
        assert!(dmac.default_const);
        refused_at(
            &L2CRYPT.replace(
                "default_action broadcast args none",
                "default_action forward args none",
            ),
            "default_action forward",
        );
    }

    #[test]
    fn lpm_and_wildcard_keys() {
        let text = L2CRYPT.replace("h.ethernet.dstAddr exact", "h.ethernet.dstAddr lpm");
        let p = load(&text).unwrap();
        assert_eq!(p.tables[1].keys[0].kind, MatchKind::Lpm);
        let text = L2CRYPT.replace("h.ethernet.dstAddr exact", "h.ethernet.dstAddr range");
        assert!(matches!(
            load(&text).unwrap_err().kind,
            SpecErrorKind::Unsupported(_)
        ));
    }

    #[test]
    fn comments_and_numbers() {
        assert_eq!(parse_number(1, "0x800").unwrap(), 0x800);
        assert_eq!(parse_number(1, "42").unwrap(), 42);
        assert!(parse_number(3, "4z").is_err());
        let t = tokenize("; a comment\n\tmov a b ; trailing\n\n");
        assert_eq!(t, vec![(2, vec!["mov", "a", "b"])]);
    }
}
