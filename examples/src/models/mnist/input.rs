//! Reading the images people have (PNG, JPEG, PGM/PNM, or raw 28×28 bytes) into the 28×28
//! grayscale pixels the MNIST network takes.
//!
//! The conversion mirrors ccexam's reference preprocessing (`inference.py`:
//! `Grayscale(1) → Resize((28, 28)) → ToTensor → Normalize`, on PIL images):
//! * grayscale is PIL's `convert("L")`, ITU-R 601-2 luma `L = (19595·R + 38470·G + 7471·B +
//!   2¹⁵) >> 16`, alpha ignored (the `image` crate's own `to_luma8` uses Rec. 709 weights, which
//!   would shift every colour pixel);
//! * the resize to 28×28 (any size, any aspect ratio, as `Resize((28, 28))`) uses the
//!   triangle (bilinear) filter widened by the scale factor when shrinking, the antialiased
//!   bilinear filter PIL applies; it is skipped for 28×28 inputs, so those are bit-exact;
//! * MNIST digits are white on black: `invert` flips dark-on-light scans and photos.
//!
//! The file is checked before it is read: only regular files (a FIFO would block, `/dev/zero`
//! would never end) of at most [`MAX_FILE_BYTES`], and the decoder gets [`image::Limits`] so a
//! small compressed file cannot expand into gigabytes.

use std::io::{Cursor, Read};
use std::path::Path;

use image::{DynamicImage, ImageFormat, ImageReader, Limits, imageops::FilterType};
use tensormem::{Error, Result};

use super::{PIXELS, SIDE};

/// Largest input file read, in bytes: far above any digit image, far below trouble.
pub const MAX_FILE_BYTES: u64 = 16 << 20;

/// Largest decoded image side in pixels (decompression-bomb guard).
pub const MAX_SIDE: u32 = 8192;

/// Reads `path` as a 28×28 grayscale image (see the module doc): PNG, JPEG or PNM by content,
/// or exactly 784 raw bytes (row-major, white digit on black, as the bundled samples).
///
/// # Errors
/// [`Error::Io`] when the path cannot be inspected or read, [`Error::Malformed`] for a
/// non-regular file, a file over [`MAX_FILE_BYTES`], an unknown format, a corrupt image or one
/// over [`MAX_SIDE`].
pub fn read_image(path: &Path, invert: bool) -> Result<Vec<u8>> {
    let bytes = read_checked(path)?;
    let malformed = |message: String| Error::Malformed {
        source_name: path.display().to_string(),
        line: 0,
        message,
    };
    let format = image::guess_format(&bytes).ok();
    let mut pixels = match format {
        Some(f @ (ImageFormat::Png | ImageFormat::Jpeg | ImageFormat::Pnm)) => {
            let mut reader = ImageReader::with_format(Cursor::new(&bytes), f);
            let mut limits = Limits::default();
            limits.max_image_width = Some(MAX_SIDE);
            limits.max_image_height = Some(MAX_SIDE);
            limits.max_alloc = Some(u64::from(MAX_SIDE) * u64::from(MAX_SIDE) * 8);
            reader.limits(limits);
            let img = reader
                .decode()
                .map_err(|e| malformed(format!("cannot decode the {f:?} image: {e}")))?;
            to_mnist_gray(&img)
        }
        _ if bytes.len() == PIXELS => bytes,
        Some(f) => {
            return Err(malformed(format!(
                "{f:?} images are not supported; use PNG, JPEG, PGM or {PIXELS} raw bytes"
            )));
        }
        None => {
            return Err(malformed(format!(
                "not a PNG, JPEG or PGM image, nor {PIXELS} raw bytes (28x28 u8): {} bytes",
                bytes.len()
            )));
        }
    };
    if invert {
        pixels.iter_mut().for_each(|p| *p = 255 - *p);
    }
    Ok(pixels)
}

/// Whether `pixels` look like a dark digit on a light background (mean above mid-gray), the
/// opposite of MNIST: the samples warn and suggest `--invert`.
pub fn looks_inverted(pixels: &[u8]) -> bool {
    let sum: u64 = pixels.iter().map(|&p| u64::from(p)).sum();
    !pixels.is_empty() && sum > 128 * pixels.len() as u64
}

/// Reads a regular file of at most [`MAX_FILE_BYTES`], refusing anything else before reading.
fn read_checked(path: &Path) -> Result<Vec<u8>> {
    let io = |source| Error::Io {
        path: path.display().to_string(),
        source,
    };
    let malformed = |message: String| Error::Malformed {
        source_name: path.display().to_string(),
        line: 0,
        message,
    };
    // `metadata` follows symlinks and never opens the file, so a FIFO is refused before an open
    // that would block for a writer.
    let meta = std::fs::metadata(path).map_err(io)?;
    if !meta.is_file() {
        return Err(malformed(format!(
            "not a regular file ({}); images are read from regular files only",
            kind(&meta.file_type())
        )));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(malformed(format!(
            "{} bytes is over the {MAX_FILE_BYTES}-byte limit for an input image",
            meta.len()
        )));
    }
    let file = std::fs::File::open(path).map_err(io)?;
    // Read at most one byte past the limit, in case the file grew after the check.
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(malformed(format!(
            "grew past the {MAX_FILE_BYTES}-byte limit while being read"
        )));
    }
    Ok(bytes)
}

/// A name for a non-regular file type, for the error message.
fn kind(t: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    if t.is_dir() {
        "a directory"
    } else {
        "not a file"
    }
}

/// Grayscale as PIL's `convert("L")`, then 28×28 as torchvision's `Resize((28, 28))`.
fn to_mnist_gray(img: &DynamicImage) -> Vec<u8> {
    let gray = match img {
        DynamicImage::ImageLuma8(g) => g.clone(),
        DynamicImage::ImageLumaA8(_)
        | DynamicImage::ImageLuma16(_)
        | DynamicImage::ImageLumaA16(_) => {
            // Gray already: only the depth changes (16-bit scaled to 8 with rounding).
            img.to_luma8()
        }
        _ => {
            let rgb = img.to_rgb8();
            image::GrayImage::from_fn(rgb.width(), rgb.height(), |x, y| {
                let [r, g, b] = rgb.get_pixel(x, y).0.map(u32::from);
                // PIL's L24 macro; at most (65536·255 + 2¹⁵) >> 16 = 255, so the cast is exact.
                image::Luma([((19595 * r + 38470 * g + 7471 * b + 0x8000) >> 16) as u8])
            })
        }
    };
    let side = SIDE as u32;
    let gray = if gray.dimensions() == (side, side) {
        gray
    } else {
        image::imageops::resize(&gray, side, side, FilterType::Triangle)
    };
    gray.into_raw()
}

#[cfg(test)]
mod tests;
