//! CSV parsing: round trip, optional columns, and every malformed case naming its line.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: a failed unwrap is a failed test"
)]

use super::super::Buffer;
use super::{parse_csv, write_csv};
use crate::Error;

fn line_of(text: &str) -> (usize, String) {
    match parse_csv(text, "t.csv") {
        Err(Error::Malformed {
            source_name,
            line,
            message,
        }) => {
            assert_eq!(source_name, "t.csv");
            (line, message)
        }
        other => panic!("expected a malformed-input error, got {other:?}"),
    }
}

#[test]
fn round_trips_with_alignment_and_offsets() {
    let text = "id,lower,upper,size,alignment,offset\na,0,2,4,4,0\nb,1,3,2,1,4\n";
    let inst = parse_csv(text, "t.csv").unwrap();
    assert_eq!(inst.ids, vec!["a", "b"]);
    assert_eq!(
        inst.buffers[0],
        Buffer {
            lower: 0,
            upper: 2,
            size: 4,
            align: 4
        }
    );
    assert_eq!(inst.offsets, Some(vec![0, 4]));
    let out = write_csv(&inst.ids, &inst.buffers, inst.offsets.as_deref()).unwrap();
    assert_eq!(out, text);
}

#[test]
fn accepts_any_column_order_blank_lines_and_spaces() {
    let inst = parse_csv("size, upper ,lower,id\n\n 5,3,1,x \n", "t.csv").unwrap();
    assert_eq!(inst.buffers, vec![Buffer::new(1, 3, 5)]);
    assert_eq!(inst.offsets, None);
}

#[test]
fn each_malformed_case_names_its_line() {
    assert_eq!(line_of("").0, 0);
    assert_eq!(line_of("id,lower,upper\n0,0,1\n").0, 1);
    // Inputs and a part of the message each must give.
    for (text, want) in [
        ("id,lower,upper\n0,0,1\n", "missing column `size`"),
        ("id,lower,upper,size,colour\n", "unknown column"),
        ("id,lower,upper,size,size\n", "duplicate column"),
        (
            "id,lower,upper,size\n0,0,1,-4\n",
            "not a non-negative integer",
        ),
        ("id,lower,upper,size\n0,0,1,0\n", "size 0"),
        (
            "id,lower,upper,size,alignment\n0,0,1,1,3\n",
            "not a power of two",
        ),
        ("id,lower,upper,size\n,0,1,1\n", "empty id"),
    ] {
        let (_, msg) = line_of(text);
        assert!(msg.contains(want), "{text:?}: {msg}");
    }
    assert_eq!(
        line_of("id,lower,upper,size\n0,0,1,1\n1,0,1\n"),
        (3, "3 fields, but the header has 4 columns".into())
    );
    let (line, msg) = line_of("id,lower,upper,size\n0,0,x,1\n");
    assert_eq!(line, 2);
    assert!(msg.contains("`x` is not a non-negative integer"), "{msg}");
    let (line, msg) = line_of("id,lower,upper,size\n0,0,1,1\n\n1,3,3,1\n");
    assert_eq!(line, 4);
    assert!(msg.contains("lower 3 must be below upper 3"), "{msg}");
    assert_eq!(
        line_of("id,lower,upper,size\n7,0,1,1\n7,1,2,1\n"),
        (3, "duplicate id `7`".into())
    );
    // The first repeat in file order, among numbers and names alike.
    let rows = "id,lower,upper,size\nx,0,1,1\n5,0,1,1\n9,0,1,1\n5,0,1,1\nx,0,1,1\n";
    assert_eq!(line_of(rows), (5, "duplicate id `5`".into()));
    let rows = "id,lower,upper,size\nx,0,1,1\n5,0,1,1\nx,0,1,1\n5,0,1,1\n";
    assert_eq!(line_of(rows), (4, "duplicate id `x`".into()));
    // Ids are strings: `07`, `+7` and `7` are three ids.
    let rows = "id,lower,upper,size\n7,0,1,1\n07,0,1,1\n+7,0,1,1\n0,0,1,1\n00,0,1,1\n";
    assert_eq!(parse_csv(rows, "t").unwrap().ids.len(), 5);
}

#[test]
fn write_checks_lengths() {
    let b = [Buffer::new(0, 1, 1)];
    assert!(matches!(
        write_csv(&[], &b, None),
        Err(Error::SizeMismatch { .. })
    ));
    assert!(matches!(
        write_csv(&["a".into()], &b, Some(&[])),
        Err(Error::SizeMismatch { .. })
    ));
}
