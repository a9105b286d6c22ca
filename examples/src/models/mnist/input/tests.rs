//! Unit tests of the image input: the committed PNG/JPEG fixtures against the raw samples, the
//! reference (PIL) preprocessing of a colour photo, and every refusal.

use std::path::PathBuf;

use super::super::assets_dir;
use super::*;

fn temp_file(name: &str, bytes: &[u8]) -> PathBuf {
    let p = std::env::temp_dir().join(format!("tensormem-mnist-{}-{name}", std::process::id()));
    std::fs::write(&p, bytes).unwrap();
    p
}

fn raw_seven() -> Vec<u8> {
    std::fs::read(assets_dir().join("mnist_test_0_label_7.u8")).unwrap()
}

fn malformed_message(r: Result<Vec<u8>>) -> String {
    match r {
        Err(Error::Malformed { message, .. }) => message,
        other => panic!("expected Malformed, got {other:?}"),
    }
}

#[test]
fn reads_raw_and_pgm_images() {
    let pixels: Vec<u8> = (0..PIXELS).map(|i| (i % 256) as u8).collect();
    let raw = temp_file("raw.u8", &pixels);
    assert_eq!(read_image(&raw, false).unwrap(), pixels);
    let mut pgm = b"P5\n# a comment\n28 28\n255\n".to_vec();
    pgm.extend(&pixels);
    let pgm_path = temp_file("img.pgm", &pgm);
    assert_eq!(read_image(&pgm_path, false).unwrap(), pixels);
    let inverted: Vec<u8> = pixels.iter().map(|p| 255 - p).collect();
    assert_eq!(read_image(&pgm_path, true).unwrap(), inverted);
    let _ = std::fs::remove_file(raw);
    let _ = std::fs::remove_file(pgm_path);
}

/// The committed PNG is the raw sample losslessly; the JPEG (quality 95) is within JPEG's error.
#[test]
fn png_and_jpeg_fixtures_decode_to_the_sample() {
    let raw = raw_seven();
    let png = read_image(&assets_dir().join("mnist_test_0_label_7.png"), false).unwrap();
    assert_eq!(png, raw);
    let jpg = read_image(&assets_dir().join("mnist_test_0_label_7.jpg"), false).unwrap();
    let worst = jpg
        .iter()
        .zip(&raw)
        .map(|(&a, &b)| a.abs_diff(b))
        .max()
        .unwrap();
    assert!(
        worst <= 8,
        "JPEG differs from the raw sample by up to {worst}"
    );
}

#[test]
fn colour_photos_are_converted_as_the_reference_preprocessing_does() {
    let path = assets_dir().join("photo_label_7_dark_on_light.png");
    let got = read_image(&path, false).unwrap();
    // PIL's `convert("L").resize((28, 28), BILINEAR)` of the 64×48 RGB photo (ccexam's
    // `Grayscale → Resize((28, 28))`), computed with Pillow 13 when the fixture was made.
    let pil = std::fs::read_to_string(assets_dir().join("photo_label_7_dark_on_light.pil28.txt"))
        .unwrap();
    let want: Vec<u8> = pil.split_whitespace().map(|v| v.parse().unwrap()).collect();
    assert_eq!(want.len(), PIXELS);
    let diffs: Vec<u8> = got
        .iter()
        .zip(&want)
        .map(|(&a, &b)| a.abs_diff(b))
        .collect();
    let worst = *diffs.iter().max().unwrap();
    let mean = diffs.iter().map(|&d| f64::from(d)).sum::<f64>() / PIXELS as f64;
    // Same filter (antialiased triangle) as PIL; the two round their fixed-point weights
    // differently.
    assert!(
        worst <= 6 && mean < 1.0,
        "worst {worst}, mean {mean:.3} levels from PIL"
    );
    assert!(looks_inverted(&got), "a light background must be noticed");
    let inverted = read_image(&path, true).unwrap();
    assert!(!looks_inverted(&inverted));
}

#[test]
fn non_regular_files_are_refused_without_reading() {
    let dir = std::env::temp_dir();
    assert!(malformed_message(read_image(&dir, false)).contains("a directory"));
    #[cfg(unix)]
    {
        // Reading /dev/zero would never end; opening a FIFO would block for a writer.
        assert!(
            malformed_message(read_image(Path::new("/dev/zero"), false))
                .contains("a character device")
        );
        let fifo = dir.join(format!("tensormem-mnist-{}-fifo", std::process::id()));
        let _ = std::fs::remove_file(&fifo);
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|s| s.success()) {
            assert!(malformed_message(read_image(&fifo, false)).contains("a FIFO"));
            let _ = std::fs::remove_file(&fifo);
        } else {
            println!("SKIP FIFO case: mkfifo unavailable");
        }
    }
}

#[test]
fn oversized_files_are_refused_before_reading() {
    let path = temp_file("big.bin", &[]);
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    // A sparse 100 MB file: refused from its size, so the test reads nothing.
    f.set_len(100_000_000).unwrap();
    let msg = malformed_message(read_image(&path, false));
    assert!(msg.contains("100000000 bytes is over"), "{msg}");
    let _ = std::fs::remove_file(path);
}

#[test]
fn other_sizes_and_formats_are_refused() {
    let short = temp_file("short.u8", &[0u8; 100]);
    assert!(malformed_message(read_image(&short, false)).contains("100 bytes"));
    let gif = temp_file("x.gif", b"GIF89a\x01\x00\x01\x00\x00\x00\x00;");
    assert!(malformed_message(read_image(&gif, false)).contains("not supported"));
    let mut broken = std::fs::read(assets_dir().join("mnist_test_0_label_7.png")).unwrap();
    broken.truncate(40);
    let broken = temp_file("broken.png", &broken);
    assert!(malformed_message(read_image(&broken, false)).contains("cannot decode"));
    assert!(matches!(
        read_image(Path::new("/nonexistent.u8"), false),
        Err(Error::Io { .. })
    ));
    for p in [short, gif, broken] {
        let _ = std::fs::remove_file(p);
    }
}

/// A PGM of another size is resized like any image, as the reference's `Resize((28, 28))`.
#[test]
fn other_sizes_are_resized_to_28() {
    let mut pgm = b"P5 56 56 255\n".to_vec();
    pgm.extend(vec![200u8; 56 * 56]);
    let path = temp_file("big.pgm", &pgm);
    assert_eq!(read_image(&path, false).unwrap(), vec![200u8; PIXELS]);
    let _ = std::fs::remove_file(path);
}

/// A tiny file that claims a huge image is refused by the decoder limits, not allocated.
#[test]
fn huge_dimensions_are_refused() {
    let mut pgm = b"P5 100000 100000 255\n".to_vec();
    pgm.extend(vec![0u8; 64]);
    let path = temp_file("bomb.pgm", &pgm);
    assert!(malformed_message(read_image(&path, false)).contains("cannot decode"));
    let _ = std::fs::remove_file(path);
}
