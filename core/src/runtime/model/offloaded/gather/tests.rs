use super::*;
use crate::ops::WeightFormat;
use crate::{DType, Graph, TensorId};

/// A lookup of `rows` ids in a `[vocab, 4]` table in `format`, then a relu of the result.
fn lookup(vocab: usize, rows: usize, format: WeightFormat) -> Graph {
    let mut g = Graph::new();
    let ids = g.input("ids", DType::U32, &[rows]);
    let mut inputs = vec![g.weight("table", format.dtype(), &[vocab, 4])];
    if format.has_scales() {
        inputs.push(g.weight("scales", DType::F32, &[vocab, 2]));
    }
    inputs.push(ids);
    let op = Op::Embedding {
        vocab: vocab as u32,
        dim: 4,
        rows: rows as u32,
        weight_format: format,
    };
    let y = g.op(op, &inputs, &[rows, 4], "lookup").unwrap();
    let z = g
        .op(
            Op::Relu {
                len: (rows * 4) as u32,
            },
            &[y],
            &[rows, 4],
            "relu",
        )
        .unwrap();
    g.output(z);
    g
}

/// A lookup of the 8 `ids` in a `[1000, 4]` f32 table added to `g`: the table and the result.
fn f32_lookup(g: &mut Graph, ids: TensorId) -> (TensorId, TensorId) {
    let table = g.weight("table", DType::F32, &[1000, 4]);
    let op = Op::Embedding {
        vocab: 1000,
        dim: 4,
        rows: 8,
        weight_format: WeightFormat::F32,
    };
    (table, g.op(op, &[table, ids], &[8, 4], "lookup").unwrap())
}

#[test]
fn a_lookup_whose_gathered_rows_are_smaller_than_its_table_is_served_from_host_memory() {
    let g = lookup(1000, 8, WeightFormat::F32);
    let found = find(&g, 10).unwrap();
    assert_eq!(found.len(), 1);
    let f = &found[0];
    assert_eq!((f.step, f.table, f.ids, f.scales), (0, 1, 0, None));
    assert_eq!(f.staged, vec![(10, Part::Table), (11, Part::Ids)]);
    match f.op {
        Op::Embedding { vocab, rows, .. } => assert_eq!((vocab, rows), (8, 8)),
        ref op => panic!("{op:?}"),
    }
}

#[test]
fn a_table_no_larger_than_its_gathered_rows_stays_whole() {
    // 8 rows of a 4-row table: gathering would move more than the table.
    assert!(
        find(&lookup(4, 8, WeightFormat::F32), 10)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn a_table_another_op_reads_stays_whole() {
    let mut g = Graph::new();
    let ids = g.input("ids", DType::U32, &[8]);
    let (table, y) = f32_lookup(&mut g, ids);
    let z = g
        .op(
            Op::Relu { len: 4000 },
            &[table],
            &[1000, 4],
            "reads the table",
        )
        .unwrap();
    g.output(y);
    g.output(z);
    assert!(find(&g, 10).unwrap().is_empty());
}

#[test]
fn ids_computed_on_the_device_are_not_known_to_the_host() {
    let mut g = Graph::new();
    let ids = g.weight("ids", DType::U32, &[8]);
    let (_, y) = f32_lookup(&mut g, ids);
    g.output(y);
    assert!(find(&g, 10).unwrap().is_empty());
}

#[test]
fn gathered_rows_follow_the_ids_and_an_id_past_the_table_reads_zeros() {
    let g = lookup(6, 3, WeightFormat::Int8 { group: 2 });
    let f = find(&g, 3).unwrap().remove(0);
    assert_eq!(
        f.staged,
        vec![(3, Part::Table), (4, Part::Scales), (5, Part::Ids)]
    );
    let table: Vec<u8> = (0..24).collect(); // row r = [4r, 4r+1, 4r+2, 4r+3]
    let scales: Vec<u8> = (100..148).collect(); // 8 bytes per row
    let ids: Vec<u8> = [5u32, 9, 0].iter().flat_map(|i| i.to_le_bytes()).collect();
    let host = vec![ids, table, scales];
    assert_eq!(
        f.gather(Part::Table, &host, 12),
        vec![20, 21, 22, 23, 0, 0, 0, 0, 0, 1, 2, 3]
    );
    let s = f.gather(Part::Scales, &host, 24);
    assert_eq!(&s[..8], &host[2][40..48]);
    assert_eq!(&s[8..16], &[0; 8]);
    assert_eq!(&s[16..24], &host[2][0..8]);
    let renumbered: Vec<u8> = [0u32, 3, 2].iter().flat_map(|i| i.to_le_bytes()).collect();
    assert_eq!(
        f.gather(Part::Ids, &host, 12),
        renumbered,
        "9 >= 6: past the 3 rows"
    );
}

#[test]
fn rewrite_moves_the_lookups_uses_to_staged_tensors() {
    let g = lookup(1000, 8, WeightFormat::F32);
    let gathers = find(&g, 3).unwrap();
    let items = vec![
        OffloadTensor {
            size: 32,
            class: TensorClass::Input,
            uses: vec![0],
        },
        OffloadTensor {
            size: 16000,
            class: TensorClass::Weight,
            uses: vec![0],
        },
        OffloadTensor {
            size: 128,
            class: TensorClass::Intermediate,
            uses: vec![0, 1],
        },
    ];
    let ops = vec![
        OffloadOp {
            label: "lookup".into(),
            bytes: 16160,
        },
        OffloadOp {
            label: "relu".into(),
            bytes: 256,
        },
    ];
    let (items, ops, sizes) = rewrite(&gathers, &items, &ops, 4).unwrap();
    assert!(items[0].uses.is_empty() && items[1].uses.is_empty());
    assert_eq!(items[2].uses, vec![0, 1]);
    assert_eq!(sizes, vec![128, 32]);
    assert_eq!(items[3].class, TensorClass::Staged);
    assert_eq!(
        (items[3].uses.clone(), items[4].uses.clone()),
        (vec![0], vec![0])
    );
    assert_eq!(ops[0].bytes, 128 + 32 + 128);
    // Numbering that does not follow the tensors is an internal error, not a wrong schedule.
    let shifted = find(&g, 7).unwrap();
    assert!(matches!(
        rewrite(&shifted, &items[..3], &ops, 4),
        Err(Error::InvariantViolated { .. })
    ));
}
