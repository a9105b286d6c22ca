//! Graph declarations: checked shape arithmetic and graph identity (issue 12, defects 3 and 4).

use super::*;

/// Regression, defect 3: `TensorDecl::len` and `Graph::op` multiplied shapes unchecked (debug
/// panic, release wrap).
#[test]
fn defect_3_tensor_sizes_are_checked() {
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

/// Regression, defect 4: an id of another graph named whatever tensor had its index here.
#[test]
fn defect_4_ids_of_another_graph_are_refused() {
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
