//! Mooncake JSONL traces: one JSON object per line with `timestamp` (ms), `input_length`,
//! `output_length` and `hash_ids`, optionally `session_id` and `delay_ms`.
//!
//! [`parse_mooncake`] turns a file's bytes into per-row columns in file order and checks every
//! row; a bad row gets a message naming the file, the line, the field and the value (as compact
//! JSON, cut to 80 characters). A row of the usual plain shape is read byte by byte
//! ([`plain_row`]); any other is read with serde_json: straight into the fields it needs, its
//! hash ids onto the id column, and only a line that fails that is read again as a [`Value`] to
//! say what is wrong. [`read_mooncake`] then turns the rows into the requests a replay reads
//! (arrival order, sessions renumbered by first arrival, the workload's checks).
//!
//! What counts as JSON is serde_json's:
//! - `NaN`, `Infinity`, numbers beyond f64 (`1e400`), lone surrogate escapes (`"\ud800"`) and
//!   values nested over 128 deep are invalid JSON, reported with serde_json's message and the
//!   column in characters. The last three are skipped unread in a field that is not used, so a
//!   row with no escapes in its keys is still good.
//! - `-0` and integers beyond 64 bits read as floats, so they are no token count, hash id or
//!   session id, and are shown as floats (`-0.0`, `1e+30`).
//! - Of duplicate keys the last wins (`hash_ids` too).

use std::fmt;

use rustc_hash::FxHashMap;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserializer;
use serde_json::Value;

use crate::control::Control;
use crate::error::{Result, SimError};

mod plain_row;
mod requests;
use plain_row::plain_row;
pub use requests::{read_mooncake, LateLines, MooncakeRequests};

/// Hash ids, timestamps and delays are below 2**63 (ids must fit an i64 in the replay).
const BELOW_2_63: u64 = 1 << 63;
/// Values in messages are cut to this many characters (77 and "..." when longer).
const SHOWN_MAX: usize = 80;
const UTF8_BOM: &[u8] = b"\xef\xbb\xbf";

/// The rows of a Mooncake trace in file order, as given (not shifted, not sorted).
#[derive(Debug, Clone, Default)]
pub struct MooncakeRows {
    /// `timestamp` (alias `created_time`) of each row, ms.
    pub timestamp_ms: Vec<f64>,
    /// `input_length` (alias `input_tokens`) of each row, tokens.
    pub input_length: Vec<u32>,
    /// `output_length` (alias `output_tokens`) of each row, tokens.
    pub output_length: Vec<u32>,
    /// Row `i` owns `hash_ids[hash_offsets[i]..hash_offsets[i + 1]]`.
    pub hash_offsets: Vec<u64>,
    pub hash_ids: Vec<u64>,
    /// Line of each row in the file, counting from 1 (blank lines count).
    pub line: Vec<u64>,
    /// Index of each row's session in `session_keys` (sessions numbered in order of first
    /// appearance in the file), -1 for a row without one.
    pub session: Vec<i64>,
    /// `delay_ms` (alias `delay`) of each row, ms; NaN where none was given.
    pub delay_ms: Vec<f64>,
    /// The `session_id` of each session.
    pub session_keys: Vec<SessionKey>,
}

/// A `session_id`: `1` and `"1"` are different sessions.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SessionKey {
    /// A 64-bit integer, as its decimal digits.
    Int(String),
    Str(String),
}

/// Parse and check the Mooncake trace `data` read from `path` (named in messages), with
/// `trace_block_size` prompt tokens per hash id.
///
/// The text is UTF-8 (a leading byte-order mark is dropped); `\n`, `\r\n` and `\r` end a line
/// and blank lines are skipped. An error names the file and line and is a [`SimError::Trace`].
pub fn parse_mooncake(data: &[u8], path: &str, trace_block_size: u64) -> Result<MooncakeRows> {
    parse_mooncake_watched(data, path, trace_block_size, None)
}

/// Rows between two looks at the control of [`parse_mooncake_watched`]: a few milliseconds.
const ROWS_PER_CHECK: usize = 4096;

/// [`parse_mooncake`] that keeps `control` at the rows read (every [`ROWS_PER_CHECK`]) and
/// stops with [`SimError::Interrupted`] once it is interrupted: a multi-GB trace is read for
/// seconds.
pub fn parse_mooncake_watched(
    data: &[u8],
    path: &str,
    trace_block_size: u64,
    control: Option<&Control>,
) -> Result<MooncakeRows> {
    let text = utf8_text(data, path)?;
    let mut rows = MooncakeRows {
        hash_offsets: vec![0],
        ..MooncakeRows::default()
    };
    let mut sessions: FxHashMap<SessionKey, i64> = FxHashMap::default();
    for (lineno, line) in lines(text) {
        if is_blank(line) {
            continue;
        }
        let row = parse_row(line, trace_block_size, &mut rows.hash_ids)
            .map_err(|message| SimError::Trace(format!("{path}:{lineno}: {message}")))?;
        rows.timestamp_ms.push(row.timestamp_ms);
        rows.input_length.push(row.input_length);
        rows.output_length.push(row.output_length);
        rows.hash_offsets.push(rows.hash_ids.len() as u64);
        rows.line.push(lineno);
        rows.delay_ms.push(row.delay_ms);
        let session = row.session.map_or(-1, |key| {
            let next = sessions.len() as i64;
            *sessions.entry(key).or_insert_with_key(|key| {
                rows.session_keys.push(key.clone());
                next
            })
        });
        rows.session.push(session);
        if let Some(c) = control.filter(|_| rows.line.len() % ROWS_PER_CHECK == 0) {
            c.checkpoint(rows.line.len())?;
        }
    }
    if rows.line.is_empty() {
        return Err(SimError::Trace(format!(
            "{path}: no requests: the file has no data rows"
        )));
    }
    Ok(rows)
}

/// The text after a leading byte-order mark, if any; a bad byte is counted from after the mark.
fn utf8_text<'a>(data: &'a [u8], path: &str) -> Result<&'a str> {
    let body = data.strip_prefix(UTF8_BOM).unwrap_or(data);
    std::str::from_utf8(body)
        .map_err(|e| SimError::Trace(format!("{path}: not UTF-8 text (byte {})", e.valid_up_to())))
}

/// The lines of `text` with their numbers from 1; `\n`, `\r\n` and a lone `\r` each end one.
fn lines(text: &str) -> impl Iterator<Item = (u64, &str)> {
    let bytes = text.as_bytes();
    let mut start = Some(0);
    let mut lineno = 0;
    std::iter::from_fn(move || {
        let from = start?;
        let end = memchr::memchr2(b'\n', b'\r', &bytes[from..]).map_or(bytes.len(), |p| from + p);
        start = match bytes.get(end) {
            None => None,
            Some(b'\r') if bytes.get(end + 1) == Some(&b'\n') => Some(end + 2),
            Some(_) => Some(end + 1),
        };
        lineno += 1;
        // Line breaks are ASCII, so both ends are character boundaries.
        Some((lineno, &text[from..end]))
    })
}

/// Whether `line` is only whitespace: Unicode's, or the separators U+001C-U+001F.
fn is_blank(line: &str) -> bool {
    line.chars()
        .all(|c| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c))
}

// Fields of a row, by index into FIELDS.
const TIMESTAMP: usize = 0;
const INPUT: usize = 2;
const OUTPUT: usize = 4;
const HASH_IDS: usize = 6;
const SESSION_ID: usize = 7;
const DELAY_MS: usize = 8;
/// Each field with an alias is followed by it.
const FIELDS: [&str; 10] = [
    "timestamp",
    "created_time",
    "input_length",
    "input_tokens",
    "output_length",
    "output_tokens",
    "hash_ids",
    "session_id",
    "delay_ms",
    "delay",
];

/// A result whose error is a message about a row, lacking only "path:line: ".
type Checked<T> = std::result::Result<T, String>;

struct Row {
    timestamp_ms: f64,
    input_length: u32,
    output_length: u32,
    session: Option<SessionKey>,
    delay_ms: f64,
}

/// The fields a row object has, read but not checked.
#[derive(Default)]
struct Fields {
    /// The value of each field in FIELDS but `hash_ids`.
    values: [Option<Value>; FIELDS.len()],
    /// Whether `hash_ids` is given and if so, whether its ids went onto the id column or why
    /// not.
    ids: Option<Checked<()>>,
}

/// One non-blank line; its hash ids go onto `ids`.
fn parse_row(line: &str, trace_block_size: u64, ids: &mut Vec<u64>) -> Checked<Row> {
    let first_id = ids.len();
    if let Some(row) = plain_row(line.as_bytes(), trace_block_size, ids) {
        return Ok(row);
    }
    ids.truncate(first_id);
    serde_row(line, trace_block_size, ids)
}

/// [`parse_row`] for any row, with serde_json.
fn serde_row(line: &str, trace_block_size: u64, ids: &mut Vec<u64>) -> Checked<Row> {
    let first_id = ids.len();
    let mut fields = Fields::default();
    let mut reader = serde_json::Deserializer::from_str(line);
    let fast = reader.deserialize_map(RowVisitor(ids, &mut fields));
    if fast.and_then(|()| reader.end()).is_ok() {
        if let Ok(row) = check(&mut fields, ids.len() - first_id, trace_block_size, "") {
            return Ok(row);
        }
    }

    // Read the line again, as a whole, to say what is wrong with it.
    let row = serde_json::from_str(line).map_err(|e| invalid_json(line, &e))?;
    let Value::Object(row) = row else {
        return Err(format!("expected a JSON object, got {}", shown(&row)));
    };
    let keys = shown(&row.keys().map(|key| key.as_str()).collect());
    fields = Fields::default();
    ids.truncate(first_id);
    for (key, value) in row {
        match FIELDS.iter().position(|f| *f == key) {
            Some(HASH_IDS) => fields.ids = Some(read_ids(&value, ids)),
            Some(field) => fields.values[field] = Some(value),
            None => {}
        }
    }
    check(&mut fields, ids.len() - first_id, trace_block_size, &keys)
}

/// Check a row's fields, whose `count` hash ids are on the id column; `keys` shows the row's
/// keys, for a missing field.
fn check(fields: &mut Fields, count: usize, trace_block_size: u64, keys: &str) -> Checked<Row> {
    let missing = |key: usize, alias: Option<usize>| {
        let alias = alias.map_or(String::new(), |a| format!(" (or '{}')", FIELDS[a]));
        format!(
            "field '{}'{alias} is missing; got fields {keys}",
            FIELDS[key]
        )
    };
    let values = &mut fields.values;
    let mut required = |key| given(values, key)?.ok_or_else(|| missing(key, Some(key + 1)));
    let (ts_key, ts) = required(TIMESTAMP)?;
    let (in_key, input) = required(INPUT)?;
    let (out_key, output) = required(OUTPUT)?;
    let hash_ids = fields.ids.take().ok_or_else(|| missing(HASH_IDS, None))?;

    let timestamp_ms = ms(ts_key, &ts)?;
    let input_length = length(in_key, &input)?;
    let output_length = length(out_key, &output)?;
    hash_ids?;
    id_count(count, input_length, trace_block_size, in_key)?;

    // JSON null counts as absent.
    let session = match fields.values[SESSION_ID].take() {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(SessionKey::Str(s)),
        Some(Value::Number(n)) if !n.is_f64() => Some(SessionKey::Int(n.to_string())),
        Some(other) => return Err(expected("session_id", "an integer or a string", &other)),
    };
    let delay_ms = match given(&mut fields.values, DELAY_MS)? {
        None | Some((_, Value::Null)) => f64::NAN,
        Some((key, delay)) if session.is_some() => ms(key, &delay)?,
        Some((key, delay)) => {
            ms(key, &delay)?;
            return Err(format!(
                "field '{key}': a delay applies between turns of a session, but the row has \
                 no 'session_id'; got {}",
                shown(&delay)
            ));
        }
    };
    Ok(Row {
        timestamp_ms,
        input_length,
        output_length,
        session,
        delay_ms,
    })
}

/// Whether `count` hash ids at `trace_block_size` tokens per id are what a prompt of
/// `input_length` tokens (given as `in_key`) needs: enough to cover it, and no more.
fn id_count(count: usize, input_length: u32, trace_block_size: u64, in_key: &str) -> Checked<()> {
    let covered = count as u128 * u128::from(trace_block_size);
    if covered < u128::from(input_length) {
        return Err(format!(
            "field 'hash_ids': too few hash ids: got {count}, which cover {covered} tokens at \
             {trace_block_size} tokens per id, but {in_key} is {input_length}"
        ));
    }
    let too_many = crate::workload::too_many_ids(
        count as u64,
        u64::from(input_length),
        trace_block_size,
        in_key,
    );
    match too_many {
        Some(message) => Err(format!("field 'hash_ids': {message}")),
        None => Ok(()),
    }
}

/// The field `key` or its alias, whichever is given, with the name it is given under.
fn given(
    values: &mut [Option<Value>; FIELDS.len()],
    key: usize,
) -> Checked<Option<(&'static str, Value)>> {
    match (values[key].take(), values[key + 1].take()) {
        (Some(_), Some(_)) => Err(format!(
            "field '{}' is given twice, also as its alias '{}'; keep one",
            FIELDS[key],
            FIELDS[key + 1]
        )),
        (Some(value), None) => Ok(Some((FIELDS[key], value))),
        (None, value) => Ok(value.map(|value| (FIELDS[key + 1], value))),
    }
}

/// A timestamp or delay: an integer or float (not a bool) in [0, 2**63), as ms.
fn ms(key: &str, value: &Value) -> Checked<f64> {
    let ms = match value {
        Value::Number(n) => match n.as_u64() {
            Some(int) => int_ms(int),
            // -0.0 passes: it is not below 0.
            None => n.as_f64().filter(|x| (0.0..BELOW_2_63 as f64).contains(x)),
        },
        _ => None,
    };
    ms.ok_or_else(|| expected(key, "a finite non-negative number of ms", value))
}

/// An integer timestamp or delay as ms, if below 2**63.
fn int_ms(int: u64) -> Option<f64> {
    // Rounds to nearest, ties to even.
    (int < BELOW_2_63).then_some(int as f64)
}

/// A token count: an integer (not a bool, not `12.0`) in 1..2**32.
fn length(key: &str, value: &Value) -> Checked<u32> {
    let n = value
        .as_u64()
        .ok_or_else(|| expected(key, "a non-negative integer", value))?;
    tokens(n)
        .ok_or_else(|| format!("field '{key}': expected between 1 and 2**32 - 1 tokens, got {n}"))
}

/// `n` as a token count, if in 1..2**32.
fn tokens(n: u64) -> Option<u32> {
    u32::try_from(n).ok().filter(|&n| n > 0)
}

/// The `hash_ids` value onto `ids`, or the message for the first thing in it that is no id.
fn read_ids(value: &Value, ids: &mut Vec<u64>) -> Checked<()> {
    let Value::Array(items) = value else {
        return Err(expected(
            "hash_ids",
            "a list of non-negative integers",
            value,
        ));
    };
    for (position, item) in items.iter().enumerate() {
        let id = item.as_u64().filter(|&id| id < BELOW_2_63).ok_or_else(|| {
            let message = expected("hash_ids", "integers in [0, 2**63)", item);
            format!("{message} at position {position}")
        })?;
        ids.push(id);
    }
    Ok(())
}

fn expected(key: &str, what: &str, value: &Value) -> String {
    format!("field '{key}': expected {what}, got {}", shown(value))
}

/// The first reading of a row object: a `hash_ids` straight onto the id column, the other
/// fields it needs into [`Fields`], the rest skipped unread. It fails on escaped keys and on
/// anything but hash ids in `hash_ids`, which the second reading then sorts out.
struct RowVisitor<'a>(&'a mut Vec<u64>, &'a mut Fields);

impl<'de> Visitor<'de> for RowVisitor<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
        let RowVisitor(ids, fields) = self;
        let first_id = ids.len();
        while let Some(key) = map.next_key::<&str>()? {
            match FIELDS.iter().position(|f| *f == key) {
                Some(HASH_IDS) => {
                    // The last of duplicate keys wins, as in the second reading.
                    ids.truncate(first_id);
                    map.next_value_seed(IdsSeed(ids))?;
                    fields.ids = Some(Ok(()));
                }
                Some(field) => fields.values[field] = Some(map.next_value()?),
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// Appends a list of integers in [0, 2**63) to the id column; fails on anything else.
struct IdsSeed<'a>(&'a mut Vec<u64>);

impl<'de> DeserializeSeed<'de> for IdsSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> std::result::Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for IdsSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of hash ids")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
        while let Some(id) = seq.next_element::<u64>()? {
            if id >= BELOW_2_63 {
                return Err(de::Error::custom("hash id out of range"));
            }
            self.0.push(id);
        }
        Ok(())
    }
}

/// `value` as compact JSON, cut to 80 characters (77 and "...").
fn shown(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(SHOWN_MAX) {
        Some(_) => {
            let cut = text.char_indices().nth(SHOWN_MAX - 3).map_or(0, |(i, _)| i);
            format!("{}...", &text[..cut])
        }
        None => text,
    }
}

/// The message for a line that is not JSON: serde_json's, with the column counted in
/// characters, and the first 80 characters of the line, quoted and escaped.
///
/// The line is quoted with `'`, so the double quotes of its JSON show as they are.
fn invalid_json(line: &str, e: &serde_json::Error) -> String {
    // serde_json saw only this line: its position is "line 1 column N", N counting bytes.
    let message = e.to_string();
    let message = message
        .rsplit_once(" at line ")
        .map_or(&*message, |(m, _)| m);
    let read = &line.as_bytes()[..e.column().min(line.len())];
    let column = read.iter().filter(|&&b| b & 0xc0 != 0x80).count();
    let head = line
        .char_indices()
        .nth(SHOWN_MAX)
        .map_or(line, |(i, _)| &line[..i]);
    let mut shown = String::from('\'');
    for c in head.chars() {
        match c {
            '"' => shown.push(c),
            _ => shown.extend(c.escape_debug()),
        }
    }
    shown.push('\'');
    format!("invalid JSON ({message} at column {column}): {shown}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::fmt::Write as _;

    const ROW: &str =
        r#"{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}"#;

    fn parse(text: &str) -> Result<MooncakeRows> {
        parse_mooncake(text.as_bytes(), "t.jsonl", 512)
    }

    /// The message for a file whose second line is `line` (the first is a good row).
    fn error(line: &str) -> String {
        match parse(&format!("{ROW}\n{line}\n{ROW}\n")) {
            Ok(_) => panic!("accepted {line}"),
            Err(e) => e.to_string(),
        }
    }

    /// A good row with `fields` (JSON members) replacing or adding to the defaults.
    fn row_with(fields: &str) -> String {
        format!(
            r#"{{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2], {fields}}}"#
        )
    }

    #[test]
    fn a_valid_file_with_sessions_crlf_bom_and_blank_lines() {
        let text = concat!(
            "\u{feff}",
            r#"{"timestamp": 5, "input_length": 600, "output_length": 5, "hash_ids": [1, 2], "session_id": "chat"}"#,
            "\r\n\r\n \t\u{3000}\u{1c}\r",
            r#"{"created_time": 2.5, "input_tokens": 1, "output_tokens": 7, "hash_ids": [9], "extra": [null, -1e300, 123456789012345678901234567890, {"a": 1, "a": 2}]}"#,
            "\r",
            r#"{"timestamp": 7, "input_length": 512, "output_length": 1, "hash_ids": [3], "session_id": 1, "delay": null}"#,
            "\n",
            r#"{"timestamp": 9, "input_length": 1024, "output_length": 2, "hash_ids": [1, 4], "session_id": "chat", "delay_ms": 250}"#,
            "\n",
            r#"{"timestamp": 1e1, "input_length": 1, "output_length": 3, "hash_ids": [-0, 9223372036854775807], "session_id": "1", "hash_ids": [0]}"#,
            "\n",
            r#"{"timestamp": 11, "input_length": 1, "output_length": 4, "hash_ids": [5], "session_id": -18, "delay_ms": 7}"#,
            "\n\n",
        );
        let rows = parse(text).unwrap();
        assert_eq!(rows.timestamp_ms, [5.0, 2.5, 7.0, 9.0, 10.0, 11.0]);
        assert_eq!(rows.input_length, [600, 1, 512, 1024, 1, 1]);
        assert_eq!(rows.output_length, [5, 7, 1, 2, 3, 4]);
        // The last of duplicate keys wins.
        assert_eq!(rows.hash_offsets, [0, 2, 3, 4, 6, 7, 8]);
        assert_eq!(rows.hash_ids, [1, 2, 9, 3, 1, 4, 0, 5]);
        // A lone \r ends a line, \r\n is one line break, blank lines count.
        assert_eq!(rows.line, [1, 4, 5, 6, 7, 8]);
        assert_eq!(rows.session, [0, -1, 1, 0, 2, 3]);
        assert_eq!(
            rows.session_keys,
            [
                SessionKey::Str("chat".into()),
                SessionKey::Int("1".into()),
                SessionKey::Str("1".into()),
                SessionKey::Int("-18".into()),
            ]
        );
        let delays: Vec<String> = rows.delay_ms.iter().map(|d| d.to_string()).collect();
        assert_eq!(delays, ["NaN", "NaN", "NaN", "250", "NaN", "7"]);
    }

    #[test]
    fn the_first_and_second_readings_agree() {
        for ids in [
            "[0]",
            "[ 7 ,8 ]",
            "[123456789012345678]",
            "[9223372036854775807, 0]",
        ] {
            // A bad `hash_ids` before the good one fails the first reading, not the row.
            // One token per id: the row's input_length is its id count.
            let count = ids.matches(',').count() + 1;
            let read = |fields: &str| {
                let text = format!(
                    r#"{{"timestamp": 0, "input_length": {count}, "output_length": 1, {fields}, "timestamp": 2}}"#
                );
                let rows = parse_mooncake(text.as_bytes(), "t.jsonl", 1).unwrap();
                (rows.hash_ids, rows.timestamp_ms)
            };
            let first = read(&format!(r#""hash_ids": {ids}"#));
            assert_eq!(
                first,
                read(&format!(r#""hash_ids": [1.5], "hash_ids": {ids}"#))
            );
            let want: Vec<u64> = ids
                .trim_matches(|c| c == '[' || c == ']')
                .split(',')
                .map(|t| t.trim().parse().unwrap())
                .collect();
            assert_eq!(first, (want, vec![2.0]), "{ids}");
        }
    }

    #[test]
    fn session_strings_decode_escapes() {
        let text = [
            row_with(r#""session_id": "\u00e9\ud83d\ude00\n""#),
            row_with(r#""session_id": "é😀\n""#),
        ]
        .join("\n");
        let rows = parse(&text).unwrap();
        assert_eq!(rows.session, [0, 0]);
        assert_eq!(rows.session_keys, [SessionKey::Str("é😀\n".into())]);
    }

    #[test]
    fn escaped_keys_name_fields() {
        let rows = parse(
            r#"{"time\u0073tamp": 3, "input_length": 1, "output_length": 1, "hash_ids": [1]}"#,
        )
        .unwrap();
        assert_eq!(rows.timestamp_ms, [3.0]);
    }

    #[test]
    fn text_errors() {
        let bad = |data: &[u8]| {
            parse_mooncake(data, "t.jsonl", 512)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(bad(b"ab\xffcd"), "t.jsonl: not UTF-8 text (byte 2)");
        // Bytes count from after the byte-order mark.
        assert_eq!(
            bad(b"\xef\xbb\xbfab\xe2\x82"),
            "t.jsonl: not UTF-8 text (byte 2)"
        );
        for empty in [&b""[..], b"\n \n\t\r\n", b"\xef\xbb\xbf"] {
            assert_eq!(
                bad(empty),
                "t.jsonl: no requests: the file has no data rows"
            );
        }
        // Only a whole byte-order mark is dropped.
        for part in [&b"\xef\xbb"[..], b"\xef"] {
            assert_eq!(bad(part), "t.jsonl: not UTF-8 text (byte 0)");
        }
    }

    #[test]
    fn json_syntax_errors_name_the_line_column_and_text() {
        let cases = [
            (
                r#"{"timestamp": 1, "input_length": 600"#,
                "EOF while parsing an object at column 36",
            ),
            (r#"{"a": }"#, "expected value at column 7"),
            ("[1,]", "trailing comma at column 4"),
            (r#"{"a": 1,}"#, "trailing comma at column 9"),
            (r#"{"a" 1}"#, "expected `:` at column 6"),
            (r#"{"a": "b}"#, "EOF while parsing a string at column 9"),
            (
                "{\"a\": \"\u{1}\"}",
                "control character (\\u0000-\\u001F) found while parsing a string at column 8",
            ),
            (r#"{"a": "\x"}"#, "invalid escape at column 9"),
            (r#"{"a": "\u12G4"}"#, "invalid escape at column 13"),
            (r#"{"a": 1} x"#, "trailing characters at column 10"),
            // Columns count characters, not bytes.
            ("{\"é\": tru}", "expected ident at column 10"),
            ("\u{feff}{}", "expected value at column 1"),
            ("nan", "expected ident at column 2"),
            ("1.", "EOF while parsing a value at column 2"),
            ("-", "EOF while parsing a value at column 1"),
        ];
        for (line, what) in cases {
            let message = error(line);
            assert!(
                message.starts_with(&format!("t.jsonl:2: invalid JSON ({what}): ")),
                "{message}"
            );
        }
        assert_eq!(
            error(r#"{"a": 'x'}"#),
            r#"t.jsonl:2: invalid JSON (expected value at column 7): '{"a": \'x\'}'"#
        );
        assert_eq!(
            error("{'a'}"),
            r#"t.jsonl:2: invalid JSON (key must be a string at column 2): '{\'a\'}'"#
        );
        // The line is shown escaped, quoted and cut to its first 80 characters.
        let long = format!("{{\"a\": \"\t\u{7f}\u{a0}é{}", "x".repeat(100));
        let shown = format!(r#"'{{"a": "\t\u{{7f}}\u{{a0}}é{}'"#, "x".repeat(69));
        assert_eq!(
            error(&long),
            format!(
                "t.jsonl:2: invalid JSON (control character (\\u0000-\\u001F) found while parsing a string at column 8): {shown}"
            )
        );
    }

    /// NaN, infinities, numbers beyond f64 and lone surrogates are not JSON.
    #[test]
    fn non_finite_numbers_and_lone_surrogates_are_invalid_json() {
        for (line, what) in [
            (row_with(r#""extra": NaN"#), "expected value at column 88"),
            (
                row_with(r#""extra": -Infinity"#),
                "invalid number at column 89",
            ),
            (
                row_with(r#""session_id": 1, "delay": 1e400"#),
                "number out of range at column 109",
            ),
            (
                row_with(r#""session_id": "\ud800""#),
                "unexpected end of hex escape at column 100",
            ),
        ] {
            let message = error(&line);
            assert!(
                message.starts_with(&format!("t.jsonl:2: invalid JSON ({what}): ")),
                "{message}"
            );
        }
        // In a field that is not used they are skipped unread, so the row is good.
        assert!(parse(&row_with(r#""extra": [1e400, "\ud800"]"#)).is_ok());
    }

    #[test]
    fn rows_must_be_objects() {
        assert_eq!(
            error("[1, 2]"),
            "t.jsonl:2: expected a JSON object, got [1,2]"
        );
        assert_eq!(
            error(r#" "abc" "#),
            r#"t.jsonl:2: expected a JSON object, got "abc""#
        );
        assert_eq!(error("12.0"), "t.jsonl:2: expected a JSON object, got 12.0");
        assert_eq!(error("null"), "t.jsonl:2: expected a JSON object, got null");
    }

    #[test]
    fn fields_and_aliases() {
        assert_eq!(
            error(&row_with(r#""input_tokens": 600"#)),
            "t.jsonl:2: field 'input_length' is given twice, also as its alias 'input_tokens'; keep one"
        );
        assert_eq!(
            error(r#"{"timestamp": 1, "input_length": 600, "hash_ids": [1, 2], "timestamp": 2}"#),
            r#"t.jsonl:2: field 'output_length' (or 'output_tokens') is missing; got fields ["timestamp","input_length","hash_ids"]"#
        );
        assert_eq!(
            error(r#"{"timestamp": 1, "input_length": 600, "output_length": 5}"#),
            r#"t.jsonl:2: field 'hash_ids' is missing; got fields ["timestamp","input_length","output_length"]"#
        );
        assert_eq!(
            error(
                r#"{"a\u00e9": 1, "input_length": 600, "output_length": 5, "hash_ids": [], "a_rather_long_name_to_cut_here": 1}"#
            ),
            r#"t.jsonl:2: field 'timestamp' (or 'created_time') is missing; got fields ["aé","input_length","output_length","hash_ids","a_rather_long_name_to_cut_he..."#
        );
    }

    #[test]
    fn timestamps() {
        let ts = |v: &str| {
            error(&format!(
                r#"{{"timestamp": {v}, "input_length": 1, "output_length": 1, "hash_ids": [1]}}"#
            ))
        };
        let want = |v: &str| {
            format!("t.jsonl:2: field 'timestamp': expected a finite non-negative number of ms, got {v}")
        };
        for (v, shown) in [
            ("-1", "-1"),
            ("-0.5", "-0.5"),
            (r#""5""#, r#""5""#),
            ("true", "true"),
            ("null", "null"),
            ("9223372036854775808", "9223372036854775808"),
            ("99999999999999999999", "1e+20"),
            ("9.3e18", "9.3e+18"),
            ("[1]", "[1]"),
        ] {
            assert_eq!(ts(v), want(shown), "{v}");
        }
        let alias = error(
            r#"{"created_time": -3, "input_length": 1, "output_length": 1, "hash_ids": [1]}"#,
        );
        assert_eq!(
            alias,
            "t.jsonl:2: field 'created_time': expected a finite non-negative number of ms, got -3"
        );
        let rows = parse(r#"{"timestamp": 9223372036854775807, "input_length": 1, "output_length": 1, "hash_ids": [1]}
{"timestamp": -0.0, "input_length": 1, "output_length": 1, "hash_ids": [1]}
{"timestamp": 0.1, "input_length": 1, "output_length": 1, "hash_ids": [1]}"#).unwrap();
        assert_eq!(rows.timestamp_ms[0], 9223372036854775807.0);
        assert!(rows.timestamp_ms[1] == 0.0 && rows.timestamp_ms[1].is_sign_negative());
        assert_eq!(rows.timestamp_ms[2], 0.1);
    }

    #[test]
    fn lengths() {
        let non_negative = |key: &str, v: &str| {
            format!("t.jsonl:2: field '{key}': expected a non-negative integer, got {v}")
        };
        let between = |key: &str, v: &str| {
            format!("t.jsonl:2: field '{key}': expected between 1 and 2**32 - 1 tokens, got {v}")
        };
        for (field, shown) in [
            (r#""input_length": -5"#, non_negative("input_length", "-5")),
            (
                r#""input_length": 12.5"#,
                non_negative("input_length", "12.5"),
            ),
            (
                r#""output_length": 12.0"#,
                non_negative("output_length", "12.0"),
            ),
            (
                r#""output_length": "12""#,
                non_negative("output_length", r#""12""#),
            ),
            (
                r#""output_length": true"#,
                non_negative("output_length", "true"),
            ),
            (
                r#""output_length": 1e2"#,
                non_negative("output_length", "100.0"),
            ),
            // serde_json reads -0 as a float.
            (
                r#""output_length": -0"#,
                non_negative("output_length", "-0.0"),
            ),
            (r#""output_length": 0"#, between("output_length", "0")),
            (
                r#""input_length": 4294967296"#,
                between("input_length", "4294967296"),
            ),
            (
                r#""input_length": 18446744073709551615"#,
                between("input_length", "18446744073709551615"),
            ),
            // Beyond 64 bits an integer reads as a float.
            (
                r#""input_length": 18446744073709551616"#,
                non_negative("input_length", "1.8446744073709552e+19"),
            ),
        ] {
            assert_eq!(error(&row_with(field)), shown, "{field}");
        }
        assert_eq!(
            error(r#"{"created_time": 1, "input_tokens": -3, "output_tokens": 1, "hash_ids": []}"#),
            non_negative("input_tokens", "-3")
        );
        let rows = parse(&row_with(
            r#""input_length": 513, "output_length": 4294967295"#,
        ))
        .unwrap();
        assert_eq!(rows.output_length, [4294967295]);
    }

    #[test]
    fn hash_ids() {
        let list = |v: &str| {
            format!(
                "t.jsonl:2: field 'hash_ids': expected a list of non-negative integers, got {v}"
            )
        };
        let element = |v: &str, at: usize| {
            format!("t.jsonl:2: field 'hash_ids': expected integers in [0, 2**63), got {v} at position {at}")
        };
        for (ids, shown) in [
            ("7", list("7")),
            (r#"{"a": 1}"#, list(r#"{"a":1}"#)),
            ("[1, -1]", element("-1", 1)),
            ("[1.5, 2]", element("1.5", 0)),
            (
                "[1, 2, 9223372036854775808]",
                element("9223372036854775808", 2),
            ),
            ("[1, 2, true]", element("true", 2)),
            ("[1, 2, 3.0]", element("3.0", 2)),
            ("[-0]", element("-0.0", 0)),
            ("[[1]]", element("[1]", 0)),
        ] {
            assert_eq!(
                error(&row_with(&format!(r#""hash_ids": {ids}"#))),
                shown,
                "{ids}"
            );
        }
        assert_eq!(
            error(&row_with(r#""input_length": 1500"#)),
            "t.jsonl:2: field 'hash_ids': too few hash ids: got 2, which cover 1024 tokens at 512 tokens per id, but input_length is 1500"
        );
        let alias = parse_mooncake(
            br#"{"timestamp": 1, "input_tokens": 64, "output_length": 1, "hash_ids": [1, 2, 3, 4]}"#,
            "t.jsonl",
            8,
        );
        assert_eq!(
            alias.unwrap_err().to_string(),
            "t.jsonl:1: field 'hash_ids': too few hash ids: got 4, which cover 32 tokens at 8 tokens per id, but input_tokens is 64"
        );
        // The product does not overflow.
        let one_id = ROW.replace("[1, 2]", "[1]");
        assert!(parse_mooncake(one_id.as_bytes(), "t.jsonl", u64::MAX).is_ok());
        // A trace hashed at 64 tokens per id read at the default 512.
        let fine = parse_mooncake(
            br#"{"timestamp": 1, "input_length": 1000, "output_length": 1, "hash_ids": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]}"#,
            "t.jsonl",
            512,
        );
        assert_eq!(
            fine.unwrap_err().to_string(),
            "t.jsonl:1: field 'hash_ids': too many hash ids: got 16, but input_length 1000 needs 2 at 512 tokens per id; the ids imply a trace block size of 64 (--trace-block-size 64)"
        );
    }

    #[test]
    fn sessions_and_delays() {
        let session = |v: &str| {
            format!("t.jsonl:2: field 'session_id': expected an integer or a string, got {v}")
        };
        assert_eq!(error(&row_with(r#""session_id": 1.5"#)), session("1.5"));
        assert_eq!(error(&row_with(r#""session_id": -0"#)), session("-0.0"));
        assert_eq!(error(&row_with(r#""session_id": true"#)), session("true"));
        assert_eq!(error(&row_with(r#""session_id": [1]"#)), session("[1]"));
        let value = |key: &str, v: &str| {
            format!(
                "t.jsonl:2: field '{key}': expected a finite non-negative number of ms, got {v}"
            )
        };
        assert_eq!(
            error(&row_with(r#""session_id": "s", "delay": -1"#)),
            value("delay", "-1")
        );
        assert_eq!(
            error(&row_with(r#""session_id": "s", "delay_ms": "5""#)),
            value("delay_ms", r#""5""#)
        );
        assert_eq!(
            error(&row_with(r#""session_id": "s", "delay": true"#)),
            value("delay", "true")
        );
        assert_eq!(
            error(&row_with(r#""delay_ms": 250"#)),
            "t.jsonl:2: field 'delay_ms': a delay applies between turns of a session, but the row has no 'session_id'; got 250"
        );
        assert_eq!(
            error(&row_with(r#""session_id": null, "delay": 7.5"#)),
            "t.jsonl:2: field 'delay': a delay applies between turns of a session, but the row has no 'session_id'; got 7.5"
        );
        assert_eq!(
            error(&row_with(
                r#""session_id": "s", "delay": 1, "delay_ms": null"#
            )),
            "t.jsonl:2: field 'delay_ms' is given twice, also as its alias 'delay'; keep one"
        );
        // A null delay needs no session.
        let rows = parse(&row_with(r#""delay": null, "session_id": null"#)).unwrap();
        assert_eq!(rows.session, [-1]);
        assert!(rows.delay_ms[0].is_nan() && rows.session_keys.is_empty());
    }

    #[test]
    fn values_are_shown_as_compact_json_cut_to_80_characters() {
        let shown_as = |v: &str| {
            let message = error(&row_with(&format!(r#""session_id": {v}"#)));
            message.split_once(", got ").unwrap().1.to_string()
        };
        // A repeated key keeps its first place and takes its last value.
        assert_eq!(
            shown_as(r#"{"b":1,"a":[1,2.50,{}],"b":-1 , "c":[]}"#),
            r#"{"b":-1,"a":[1,2.5,{}],"c":[]}"#
        );
        assert_eq!(
            shown_as(r#"["é\u00e9😀\t\"\\/\u0001"]"#),
            r#"["éé😀\t\"\\/\u0001"]"#
        );
        assert_eq!(
            shown_as("[1e16, 1e15, 0.0001, 0.00001, 1.5e-7, -0.0, 123456789.125]"),
            "[1e+16,1000000000000000.0,0.0001,0.00001,1.5e-7,-0.0,123456789.125]"
        );
        assert_eq!(
            shown_as("[1e22, 5e-324, -1.7976931348623157e308]"),
            "[1e+22,5e-324,-1.7976931348623157e+308]"
        );
        let long = format!("[{}]", ["1234567"; 20].join(","));
        assert_eq!(
            shown_as(&long),
            format!("[{},1234...", ["1234567"; 9].join(","))
        );
        let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
        assert_eq!(shown_as(&deep), format!("{}...", "[".repeat(77)));
        // Characters, not bytes, are counted.
        let wide = format!(r#"["{}"]"#, "é".repeat(100));
        assert_eq!(shown_as(&wide), format!(r#"["{}..."#, "é".repeat(75)));
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        // An ignored field of a good row is skipped without being read, however deep.
        let deep = format!("{}{}", "[".repeat(1_000_000), "]".repeat(1_000_000));
        let rows = parse(&row_with(&format!(r#""extra": {deep}"#))).unwrap();
        assert_eq!(rows.line, [1]);
        let bad = error(&row_with(&format!(r#""extra": {deep}, "delay": 1"#)));
        assert!(
            bad.starts_with("t.jsonl:2: invalid JSON (recursion limit exceeded at column 214): "),
            "{bad}"
        );
        let deep_session = error(&row_with(&format!(r#""session_id": {deep}"#)));
        assert!(
            deep_session.contains("(recursion limit exceeded at column 219)"),
            "{deep_session}"
        );
    }

    /// Tokens per id of the rows `arb_row` makes.
    const ARB_BLOCK: u32 = 1 << 28;

    /// A row whose input_length needs exactly its ids at `ARB_BLOCK` tokens per id.
    fn arb_row() -> impl Strategy<Value = (u64, u32, u32, Vec<u64>, Option<i64>)> {
        (
            0u64..1 << 53,
            1u32..=ARB_BLOCK,
            1u32..=u32::MAX,
            prop::collection::vec(0u64..1 << 63, 1..6),
            prop::option::of(-3i64..3),
        )
            .prop_map(|(ts, last, output, ids, session)| {
                let input = (ids.len() as u32 - 1) * ARB_BLOCK + last;
                (ts, input, output, ids, session)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        /// Rows written with aliases, spacing and line breaks of every kind read back as given.
        #[test]
        fn written_rows_read_back(rows in prop::collection::vec((arb_row(), any::<bool>(), 0usize..3), 1..8)) {
            let mut text = String::new();
            for ((ts, input, output, ids, session), alias, gap) in &rows {
                let [t, i, o] = if *alias { ["created_time", "input_tokens", "output_tokens"] } else { ["timestamp", "input_length", "output_length"] };
                let ids: Vec<String> = ids.iter().map(u64::to_string).collect();
                let session = session.map_or(String::new(), |s| format!(r#", "session_id": {s}"#));
                let _ = write!(text, r#" {{"{t}":{ts} , "{i}": {input},"{o}" :{output}, "hash_ids": [ {} ]{session}}}"#, ids.join(" ,"));
                text.push_str(["\n", "\r\n", "\r"][*gap]);
                text.push_str(&"\n".repeat(*gap));
            }
            let parsed = parse_mooncake(text.as_bytes(), "t.jsonl", u64::from(ARB_BLOCK)).unwrap();
            prop_assert_eq!(parsed.line.len(), rows.len());
            let mut offset = 0;
            for (n, ((ts, input, output, ids, session), _, _)) in rows.iter().enumerate() {
                prop_assert_eq!(parsed.timestamp_ms[n], *ts as f64);
                prop_assert_eq!(parsed.input_length[n], *input);
                prop_assert_eq!(parsed.output_length[n], *output);
                offset += ids.len();
                prop_assert_eq!(parsed.hash_offsets[n + 1] as usize, offset);
                let key = usize::try_from(parsed.session[n]).ok().map(|s| &parsed.session_keys[s]);
                let want = session.map(|s| SessionKey::Int(s.to_string()));
                prop_assert_eq!(key, want.as_ref());
            }
            let ids: Vec<u64> = rows.iter().flat_map(|r| r.0 .3.clone()).collect();
            prop_assert_eq!(parsed.hash_ids, ids);
        }

        /// No input makes the parser panic: random bytes, and good rows with bytes changed.
        #[test]
        fn any_bytes_are_an_answer_not_a_panic(data in prop::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse_mooncake(&data, "t.jsonl", 512);
        }

        #[test]
        fn damaged_rows_are_an_answer_not_a_panic(
            edits in prop::collection::vec((any::<prop::sample::Index>(), prop::sample::select(
                b"{}[]\",:\\ 0123456789.eE-+ntfNIaul\x01\r\n\xc3\xa9\xef\xbb\xbf".to_vec())), 1..4),
            extra in prop::sample::select(vec![
                "", r#", "session_id": "\ud800x", "delay": 1.5"#, r#", "x": [NaN, {"a": -Infinity}]"#,
                r#", "hash_ids": [1, -0, 2.0]"#, r#", "session_id": 12345678901234567890123"#,
                r#", "x": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"#,
            ]),
        ) {
            let mut data = format!("{}{extra}}}", ROW.trim_end_matches('}')).into_bytes();
            let len = data.len();
            for (at, byte) in edits {
                data[at.index(len)] = byte;
            }
            let _ = parse_mooncake(&data, "t.jsonl", 512);
        }
    }
}
