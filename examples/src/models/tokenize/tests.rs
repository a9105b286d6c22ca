//! Unit tests of `tokenize`.

use super::*;

#[test]
fn pads_to_the_longest_with_masks_and_positions() {
    let tb = pad_batch(&[vec![101, 7, 102], vec![101, 102]]);
    assert_eq!((tb.batch, tb.seq), (2, 3));
    assert_eq!(tb.ids, [101, 7, 102, 101, 102, PAD_ID]);
    assert_eq!(tb.mask, [1.0, 1.0, 1.0, 1.0, 1.0, 0.0]);
    assert_eq!(tb.positions, [0, 1, 2, 0, 1, 2]);
    assert_eq!(tb.type_ids, [0; 6]);
    assert_eq!(tb.lengths, [3, 2]);
}

#[test]
fn single_sentence_has_no_padding() {
    let tb = pad_batch(&[vec![101, 5, 6, 102]]);
    assert_eq!((tb.batch, tb.seq), (1, 4));
    assert!(tb.mask.iter().all(|&m| m == 1.0));
}

#[test]
fn missing_tokenizer_file_is_malformed() {
    let e = WordPiece::open(Path::new("/nonexistent/tokenizer.json"))
        .err()
        .unwrap();
    assert!(matches!(e, Error::Malformed { .. }), "{e}");
}
