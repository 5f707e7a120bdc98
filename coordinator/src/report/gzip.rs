//! One gzip stream built from pieces deflated apart, on any thread, as pigz
//! does: each piece is raw deflate ending in a sync flush (byte-aligned, no
//! final block), so that pieces written one after another are one deflate
//! stream; the stream's CRC-32 is combined from the pieces'.

use std::io::Write;

use crc32fast::Hasher;
use flate2::write::DeflateEncoder;
use flate2::Compression;

/// Data deflated as a piece of a stream, with what the gzip trailer needs.
#[derive(Default)]
pub struct Deflated {
    bytes: Vec<u8>,
    crc: Hasher,
    len: u64,
}

impl Deflated {
    /// `data` deflated (fast level) as a piece of a stream.
    pub fn new(data: &[u8]) -> Self {
        let mut encoder = DeflateEncoder::new(Vec::new(), Compression::fast());
        encoder
            .write_all(data)
            .and_then(|()| encoder.flush())
            .expect("deflating into memory cannot fail");
        let bytes = std::mem::take(encoder.get_mut());
        let mut crc = Hasher::new();
        crc.update(data);
        Deflated {
            bytes,
            crc,
            len: data.len() as u64,
        }
    }

    /// Whether the piece holds no data.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Writes a gzip member of pieces: the header, each piece, then the final
/// block and the trailer.
pub struct GzipWriter<W: Write> {
    out: W,
    crc: Hasher,
    len: u64,
}

impl<W: Write> GzipWriter<W> {
    /// Starts the member in `out`.
    pub fn new(mut out: W) -> std::io::Result<Self> {
        // Magic, deflate, no flags, no time, no extra flags, unknown OS.
        out.write_all(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff])?;
        Ok(GzipWriter {
            out,
            crc: Hasher::new(),
            len: 0,
        })
    }

    /// Appends a piece deflated elsewhere.
    pub fn piece(&mut self, piece: &Deflated) -> std::io::Result<()> {
        self.out.write_all(&piece.bytes)?;
        self.crc.combine(&piece.crc);
        self.len += piece.len;
        Ok(())
    }

    /// Appends `data` as it is, in stored (uncompressed) blocks: for the
    /// few bytes between pieces, which are not worth a compressor.
    pub fn data(&mut self, data: &[u8]) -> std::io::Result<()> {
        for block in data.chunks(u16::MAX as usize) {
            let len = block.len() as u16;
            // Not final, stored; then the length and its complement.
            self.out.write_all(&[0x00])?;
            self.out.write_all(&len.to_le_bytes())?;
            self.out.write_all(&(!len).to_le_bytes())?;
            self.out.write_all(block)?;
        }
        self.crc.update(data);
        self.len += data.len() as u64;
        Ok(())
    }

    /// Ends the stream (an empty stored block marked final) and writes the
    /// trailer: the CRC-32 and the length modulo 2³².
    pub fn finish(mut self) -> std::io::Result<W> {
        self.out.write_all(&[0x01, 0x00, 0x00, 0xff, 0xff])?;
        self.out.write_all(&self.crc.finalize().to_le_bytes())?;
        self.out.write_all(&(self.len as u32).to_le_bytes())?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn pieces_deflated_apart_read_back_as_one_gzip_stream() {
        let parts: Vec<Vec<u8>> = (0..5)
            .map(|i| format!("piece {i}: {}\n", "x".repeat(i * 10_000)).into_bytes())
            .collect();
        let pieces: Vec<Deflated> = parts.iter().map(|p| Deflated::new(p)).collect();
        let mut gzip = GzipWriter::new(Vec::new()).unwrap();
        gzip.data(b"head\n").unwrap();
        gzip.data(&[]).unwrap();
        for piece in &pieces {
            gzip.piece(piece).unwrap();
        }
        gzip.piece(&Deflated::new(b"")).unwrap();
        let stored = vec![b'y'; 70_000];
        gzip.data(&stored).unwrap();
        let bytes = gzip.finish().unwrap();
        // flate2 checks the CRC and the length in the trailer.
        let mut text = Vec::new();
        flate2::read::GzDecoder::new(&bytes[..])
            .read_to_end(&mut text)
            .unwrap();
        assert_eq!(text, [b"head\n".to_vec(), parts.concat(), stored].concat());
    }
}
