//! The shape nearly every row of a Mooncake trace has, read byte by byte: an object of
//! `timestamp`, `input_length`, `output_length` (or their aliases) given as plain integers and
//! `hash_ids` as a list of them, keys in any order, at most one space between tokens.
//! serde_json spends most of a trace's reading on the hash ids (a few dozen per row); this
//! reads them several times faster.
//!
//! Anything else (another key, an escape in a key, a repeated key, a float, null, a bad value)
//! makes [`plain_row`] answer None and leaves the row to the serde_json reading, so what it
//! accepts it reads exactly as that one would, and every message stays that reading's.

use super::{id_count, int_ms, tokens, Row, FIELDS, HASH_IDS, INPUT, OUTPUT, TIMESTAMP};

/// The row `line` if it has the plain shape and passes every check, its hash ids pushed onto
/// `ids`; None otherwise, with whatever ids it pushed left for the caller to drop.
pub(super) fn plain_row(line: &[u8], trace_block_size: u64, ids: &mut Vec<u64>) -> Option<Row> {
    let first_id = ids.len();
    // The integer of each field before HASH_IDS, and which fields were seen.
    let mut values = [0u64; HASH_IDS];
    let mut seen = 0u32;
    let mut at = Cursor { rest: line };
    at.expect(b'{')?;
    loop {
        at.expect(b'"')?;
        // A key with an escape has a backslash before its closing quote: no field name matches.
        let len = memchr::memchr(b'"', at.rest)?;
        let key = &at.rest[..len];
        at.rest = &at.rest[len + 1..];
        let field = FIELDS[..=HASH_IDS]
            .iter()
            .position(|f| f.as_bytes() == key)?;
        if seen & 1 << field != 0 {
            return None;
        }
        seen |= 1 << field;
        at.expect(b':')?;
        if field == HASH_IDS {
            at.expect(b'[')?;
            if !at.next_is(b']') {
                loop {
                    let id = at.integer()?;
                    (id < super::BELOW_2_63).then_some(())?;
                    ids.push(id);
                    if !at.next_is(b',') {
                        break;
                    }
                }
                at.expect(b']')?;
            }
        } else {
            values[field] = at.integer()?;
        }
        if !at.next_is(b',') {
            break;
        }
    }
    at.expect(b'}')?;
    at.skip_whitespace();
    at.rest.is_empty().then_some(())?;

    // Each of the three numbers under exactly one of its two names, and the ids given.
    let one_of = |key: usize| match (seen >> key) & 0b11 {
        0b01 => Some((FIELDS[key], values[key])),
        0b10 => Some((FIELDS[key + 1], values[key + 1])),
        _ => None,
    };
    let (_, timestamp) = one_of(TIMESTAMP)?;
    let (in_key, input) = one_of(INPUT)?;
    let (_, output) = one_of(OUTPUT)?;
    (seen & 1 << HASH_IDS != 0).then_some(())?;
    let input_length = tokens(input)?;
    id_count(ids.len() - first_id, input_length, trace_block_size, in_key).ok()?;
    Some(Row {
        timestamp_ms: int_ms(timestamp)?,
        input_length,
        output_length: tokens(output)?,
        session: None,
        delay_ms: f64::NAN,
    })
}

/// What is left of a line to read.
struct Cursor<'a> {
    rest: &'a [u8],
}

impl Cursor<'_> {
    /// Past one space, if that comes next: the plain shape (`json.dumps`'s) has at most one
    /// between tokens, and any other spacing is left to serde_json.
    fn skip_whitespace(&mut self) {
        if let [b' ', tail @ ..] = self.rest {
            self.rest = tail;
        }
    }

    /// Past whitespace and `byte`, if that comes next.
    fn next_is(&mut self, byte: u8) -> bool {
        self.skip_whitespace();
        match self.rest {
            [first, tail @ ..] if *first == byte => {
                self.rest = tail;
                true
            }
            _ => false,
        }
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        self.next_is(byte).then_some(())
    }

    /// A JSON integer of at most 19 digits, after whitespace: that fits a u64, and every
    /// longer one is out of range for any field. `01` is no JSON; `1.5` and `1e3` fail on the
    /// byte after.
    fn integer(&mut self) -> Option<u64> {
        self.skip_whitespace();
        let mut n = 0u64;
        let mut digits = 0;
        while let Some(d) = self.rest.get(digits).map(|b| b.wrapping_sub(b'0')) {
            if d > 9 {
                break;
            }
            // Wraps only past 19 digits, which are refused below.
            n = n.wrapping_mul(10).wrapping_add(u64::from(d));
            digits += 1;
        }
        if !(1..=19).contains(&digits) || (self.rest[0] == b'0' && digits > 1) {
            return None;
        }
        self.rest = &self.rest[digits..];
        Some(n)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{serde_row, SessionKey};
    use super::*;
    use proptest::prelude::*;

    const ROW: &str =
        r#"{"timestamp": 3, "input_length": 600, "output_length": 5, "hash_ids": [1, 20, 0]}"#;

    /// The row and ids of a line read plainly, if it reads so.
    fn plain(line: &str) -> Option<(Row, Vec<u64>)> {
        let mut ids = vec![];
        plain_row(line.as_bytes(), 256, &mut ids).map(|row| (row, ids))
    }

    type Seen = (u64, u32, u32, Option<SessionKey>, u64, Vec<u64>);

    fn seen((row, ids): (Row, Vec<u64>)) -> Seen {
        let Row {
            timestamp_ms,
            input_length,
            output_length,
            session,
            delay_ms,
        } = row;
        let delay = delay_ms.to_bits();
        (
            timestamp_ms.to_bits(),
            input_length,
            output_length,
            session,
            delay,
            ids,
        )
    }

    /// What serde_json's reading makes of `line`, when it is a good row.
    fn by_serde(line: &str) -> Option<Seen> {
        let mut ids = vec![];
        serde_row(line, 256, &mut ids)
            .ok()
            .map(|row| seen((row, ids)))
    }

    #[test]
    fn plain_rows_read_as_serde_reads_them() {
        for line in [
            ROW,
            r#"{"timestamp":3,"input_length":600,"output_length":5,"hash_ids":[1,20,0]}"#,
            r#" { "hash_ids" : [ 1 , 20 , 0 ] , "output_tokens" : 5 , "input_tokens" : 600 , "created_time" : 3 } "#,
            r#"{"timestamp": 9223372036854775807, "input_length": 4294967295, "output_length": 1, "hash_ids": [9223372036854775807]}"#,
        ] {
            let block = if line.contains("4294967295") {
                1 << 32
            } else {
                256
            };
            let mut ids = vec![];
            let row = plain_row(line.as_bytes(), block, &mut ids).expect(line);
            let mut serde_ids = vec![];
            let want = serde_row(line, block, &mut serde_ids).map(|row| seen((row, serde_ids)));
            assert_eq!(Ok(seen((row, ids))), want, "{line}");
        }
    }

    #[test]
    fn anything_unusual_is_left_to_serde() {
        for (from, to) in [
            ("3,", "03,"),
            ("3,", "3.0,"),
            ("3,", "3e0,"),
            ("3,", "-3,"),
            ("3,", "10000000000000000000,"),
            ("3,", "9223372036854775808,"),
            ("3,", "null,"),
            ("3,", "\"3\","),
            ("3,", "3,  "),
            ("3,", "3\t,"),
            (": 600", ":  600"),
            ("600", "0"),
            ("600", "4294967296"),
            ("5,", "0,"),
            ("0]", "9223372036854775808]"),
            ("0]", "0,]"),
            ("[1", "[,1"),
            ("timestamp", "time\\u0073tamp"),
            ("timestamp", "time"),
            ("\"timestamp\": 3,", ""),
            (", \"hash_ids\": [1, 20, 0]", ""),
            ("}", ", \"session_id\": 1}"),
            ("}", ", \"timestamp\": 3}"),
            ("}", ", \"created_time\": 3}"),
            ("}", "}x"),
            ("}", "} "),
            ("{", "\u{a0}{"),
            ("[1, 20, 0]", "[1, 20]"),
            ("[1, 20, 0]", "[1, 20, 0, 4]"),
            ("[1, 20, 0]", "[]"),
        ] {
            let line = ROW.replacen(from, to, 1);
            // "} " ends in a space the line does not have otherwise: both read it.
            if to == "} " {
                assert!(plain(&line).is_some());
                continue;
            }
            assert!(plain(&line).is_none(), "{line}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// A row with bytes changed reads plainly only as serde_json reads it.
        #[test]
        fn damaged_plain_rows_read_as_serde_reads_them(
            edits in prop::collection::vec((any::<prop::sample::Index>(), prop::sample::select(
                b"{}[]\",:\\ \t0123456789.eE-+nul\xc3\xa9".to_vec())), 0..4),
        ) {
            let mut data = ROW.as_bytes().to_vec();
            let len = data.len();
            for (at, byte) in edits {
                data[at.index(len)] = byte;
            }
            let Ok(line) = std::str::from_utf8(&data) else { return Ok(()) };
            if let Some(read) = plain(line) {
                prop_assert_eq!(Some(seen(read)), by_serde(line), "{}", line);
            }
        }
    }
}
