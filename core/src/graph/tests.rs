//! Graph declarations: checked shape arithmetic and graph identity (issue 12, defects 3 and 4).

use super::*;

/// Regression: `TensorDecl::len` and `Graph::op` multiplied shapes unchecked (debug
/// panic, release wrap).
#[test]
fn tensor_sizes_are_checked() {
    let mut g = Graph::new();
    let huge = g.input("huge", DType::F32, &[usize::MAX, 2]);
    let decl = g.decl(huge).unwrap();
    assert!(matches!(decl.len(), Err(Error::ArithmeticOverflow { .. })));
    assert!(matches!(decl.size(), Err(Error::ArithmeticOverflow { .. })));
    let big = g.input("big", DType::F64, &[1 << 62]);
    assert_eq!(g.decl(big).unwrap().len().unwrap(), 1 << 62);
    assert!(matches!(
        g.decl(big).unwrap().size(),
        Err(Error::ArithmeticOverflow { .. })
    ));
    assert!(matches!(
        g.op(Op::Relu { len: 4 }, &[huge], &[4], "relu"),
        Err(Error::ArithmeticOverflow { .. })
    ));
    let x = g.input("x", DType::F32, &[4]);
    assert!(matches!(
        g.op(Op::Relu { len: 4 }, &[x], &[usize::MAX, 3], "relu"),
        Err(Error::ArithmeticOverflow { .. })
    ));
    assert!(matches!(
        g.reshape(x, &[usize::MAX, usize::MAX]),
        Err(Error::ArithmeticOverflow { .. })
    ));
}

/// Regression: an id of another graph named whatever tensor had its index here.
#[test]
fn ids_of_another_graph_are_refused() {
    let mut a = Graph::new();
    let mut b = Graph::new();
    let xa = a.input("x", DType::F32, &[4]);
    let xb = b.input("x", DType::F32, &[4]);
    assert_eq!(xa.index(), xb.index());
    assert!(a.contains(xa) && !a.contains(xb));
    assert!(matches!(
        a.decl(xb),
        Err(Error::ForeignTensor {
            tensor: 0,
            tensors: 1
        })
    ));
    assert!(matches!(
        a.op(Op::Relu { len: 4 }, &[xb], &[4], "relu"),
        Err(Error::ForeignTensor { .. })
    ));
    // A clone is the same graph.
    let c = a.clone();
    assert!(c.contains(xa));
}

/// Views: a byte range of a root, checked against its bounds and element size, composing with
/// reshapes and other views.
#[test]
fn views_are_byte_ranges_of_their_root() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[4, 8]);
    let v = g.view(x, 32, &[2, 4]).unwrap();
    let d = g.decl(v).unwrap();
    assert_eq!(
        (d.offset, d.size().unwrap(), d.kind),
        (32, 32, TensorKind::Input)
    );
    assert_eq!(g.root(v), x);
    // A view of a view, and a reshape of it, keep the offset in the root.
    let w = g.view(v, 16, &[4]).unwrap();
    assert_eq!(g.decl(w).unwrap().offset, 48);
    let r = g.reshape(w, &[2, 2]).unwrap();
    assert_eq!((g.decl(r).unwrap().offset, g.root(r)), (48, x));
    assert!(matches!(
        g.view(x, 120, &[4]),
        Err(Error::OutOfBounds {
            offset: 120,
            size: 16,
            limit: 128,
            ..
        })
    ));
    assert!(matches!(
        g.view(v, 20, &[4]),
        Err(Error::OutOfBounds { limit: 32, .. })
    ));
    assert!(matches!(
        g.view(x, 2, &[1]),
        Err(Error::Misaligned {
            value: 2,
            align: 4,
            ..
        })
    ));
    assert!(matches!(
        g.view(x, 0, &[usize::MAX, 4]),
        Err(Error::ArithmeticOverflow { .. })
    ));
}

/// `op_into` writes into a view of an intermediate only, with the op's element type and count.
#[test]
fn ops_write_into_views_of_intermediates_only() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[8]);
    let y = g.op(Op::Relu { len: 8 }, &[x], &[8], "y").unwrap();
    let lo = g.view(y, 0, &[4]).unwrap();
    let hi = g.view(y, 16, &[4]).unwrap();
    let xl = g.view(x, 0, &[4]).unwrap();
    g.op_into(Op::Scale { len: 4, alpha: 2.0 }, &[xl], lo, "lo")
        .unwrap();
    g.op_into(Op::Scale { len: 4, alpha: 3.0 }, &[xl], hi, "hi")
        .unwrap();
    assert_eq!(g.nodes().len(), 3);
    let msg = |r: Result<()>| r.unwrap_err().to_string();
    assert!(msg(g.op_into(Op::Relu { len: 4 }, &[xl], xl, "into an input")).contains("a Input"));
    assert!(msg(g.op_into(Op::Relu { len: 8 }, &[x], y, "into a root")).contains("root"));
    assert!(matches!(
        g.op_into(Op::Relu { len: 8 }, &[x], lo, "too long"),
        Err(Error::SizeMismatch { .. })
    ));
}
