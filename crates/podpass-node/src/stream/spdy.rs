//! SPDY/3.1 as Kubernetes streams speak it (moby/spdystream, the framing of the SPDY/3 draft):
//! frames and their zlib-compressed header blocks, and the client side of one connection
//! after an HTTP `Upgrade: SPDY/3.1` — streams opened with headers, their data in both
//! directions, a half-close (FIN) of either side, pings answered. spdystream does no flow
//! control, so WINDOW_UPDATE and SETTINGS are read and ignored. Every frame the peer sends
//! is bounded (length, header count and size) before it is believed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use thiserror::Error;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

/// The `Upgrade` token.
pub const UPGRADE: &str = "SPDY/3.1";

const VERSION: u16 = 3;
const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const SETTINGS: u16 = 4;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const HEADERS: u16 = 8;
const WINDOW_UPDATE: u16 = 9;
const FLAG_FIN: u8 = 0x01;
/// RST_STREAM `REFUSED_STREAM`.
const REFUSED_STREAM: u32 = 3;

/// The largest frame read (the format allows 16 MiB; spdystream writes data in 32 KiB).
const MAX_FRAME: usize = 1 << 20;
/// The largest header block once decompressed.
const MAX_HEADER_BLOCK: usize = 64 << 10;
/// The most header pairs in a block.
const MAX_HEADERS: usize = 128;
/// The largest data frame written.
pub const MAX_DATA: usize = 32 << 10;
/// Data frames buffered for a stream's reader before the connection's reading waits.
const STREAM_BUFFER: usize = 16;

/// The SPDY/3 header-compression dictionary (the draft's section 2.6.10.1; 1 423 bytes,
/// Adler-32 `0xe3c6a7c2`).
static DICTIONARY: &[u8] = include_bytes!("spdy3_dictionary.bin");

/// A SPDY connection failed.
#[derive(Debug, Error)]
pub enum SpdyError {
    /// Reading or writing the connection.
    #[error("spdy connection: {0}")]
    Io(#[from] std::io::Error),
    /// The peer broke the protocol.
    #[error("spdy protocol: {0}")]
    Protocol(String),
    /// The connection is gone.
    #[error("spdy connection closed")]
    Closed,
    /// The peer refused a stream.
    #[error("spdy stream {id} reset by the peer (status {status})")]
    Reset {
        /// The stream.
        id: u32,
        /// Its RST_STREAM status.
        status: u32,
    },
}

fn protocol(message: impl Into<String>) -> SpdyError {
    SpdyError::Protocol(message.into())
}

/// One frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Frame {
    SynStream {
        id: u32,
        headers: Vec<(String, String)>,
        fin: bool,
    },
    SynReply {
        id: u32,
        headers: Vec<(String, String)>,
        fin: bool,
    },
    RstStream {
        id: u32,
        status: u32,
    },
    Ping(u32),
    GoAway {
        last: u32,
    },
    Headers {
        id: u32,
    },
    Data {
        id: u32,
        data: Vec<u8>,
        fin: bool,
    },
    /// SETTINGS, WINDOW_UPDATE, NOOP and any later type: read and ignored.
    Ignored,
}

/// The header block (count, then length-prefixed names and values), as written.
fn header_block(headers: &[(String, String)]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&u32::try_from(headers.len()).unwrap_or(u32::MAX).to_be_bytes());
    for (name, value) in headers {
        for s in [name.to_ascii_lowercase().as_bytes(), value.as_bytes()] {
            out.extend_from_slice(&u32::try_from(s.len()).unwrap_or(u32::MAX).to_be_bytes());
            out.extend_from_slice(s);
        }
    }
    out
}

/// A header block read back, bounded.
fn parse_header_block(block: &[u8]) -> Result<Vec<(String, String)>, SpdyError> {
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<&[u8], SpdyError> {
        let end = at.checked_add(n).filter(|e| *e <= block.len()).ok_or_else(|| protocol("truncated header block"))?;
        let s = &block[at..end];
        at = end;
        Ok(s)
    };
    let word = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
    let count = word(take(4)?);
    if count > MAX_HEADERS {
        return Err(protocol(format!("{count} headers in one block (at most {MAX_HEADERS})")));
    }
    let mut headers = Vec::with_capacity(count);
    for _ in 0..count {
        let n = word(take(4)?);
        let name = String::from_utf8_lossy(take(n)?).into_owned();
        let n = word(take(4)?);
        let value = String::from_utf8_lossy(take(n)?).into_owned();
        headers.push((name, value));
    }
    Ok(headers)
}

/// Compresses header blocks, one zlib stream per direction of a connection.
pub(crate) struct Encoder {
    z: flate2::Compress,
}

impl Encoder {
    pub(crate) fn new() -> Result<Encoder, SpdyError> {
        let mut z = flate2::Compress::new(flate2::Compression::default(), true);
        z.set_dictionary(DICTIONARY).map_err(|e| protocol(format!("header dictionary: {e}")))?;
        Ok(Encoder { z })
    }

    fn compress(&mut self, block: &[u8]) -> Result<Vec<u8>, SpdyError> {
        let mut out = Vec::with_capacity(block.len() + 64);
        let mut input = block;
        loop {
            out.reserve(256);
            let before = self.z.total_in();
            self.z
                .compress_vec(input, &mut out, flate2::FlushCompress::Sync)
                .map_err(|e| protocol(format!("compressing headers: {e}")))?;
            let used = usize::try_from(self.z.total_in() - before).unwrap_or(input.len());
            input = &input[used..];
            // A sync flush is complete once the input is taken and room was left over.
            if input.is_empty() && out.len() < out.capacity() {
                return Ok(out);
            }
        }
    }

    /// The frame's bytes.
    pub(crate) fn encode(&mut self, frame: &Frame) -> Result<Vec<u8>, SpdyError> {
        let control = |kind: u16, flags: u8, body: Vec<u8>| -> Result<Vec<u8>, SpdyError> {
            let len =
                u32::try_from(body.len()).ok().filter(|l| *l < 1 << 24).ok_or_else(|| protocol("frame too long"))?;
            let mut out = Vec::with_capacity(8 + body.len());
            out.extend_from_slice(&(0x8000 | VERSION).to_be_bytes());
            out.extend_from_slice(&kind.to_be_bytes());
            out.extend_from_slice(&(u32::from(flags) << 24 | len).to_be_bytes());
            out.extend_from_slice(&body);
            Ok(out)
        };
        let fin = |f: bool| if f { FLAG_FIN } else { 0 };
        match frame {
            Frame::SynStream { id, headers, fin: f } => {
                let mut body = Vec::new();
                body.extend_from_slice(&(id & 0x7fff_ffff).to_be_bytes());
                body.extend_from_slice(&0u32.to_be_bytes());
                body.extend_from_slice(&[0, 0]);
                body.extend(self.compress(&header_block(headers))?);
                control(SYN_STREAM, fin(*f), body)
            }
            Frame::SynReply { id, headers, fin: f } => {
                let mut body = (id & 0x7fff_ffff).to_be_bytes().to_vec();
                body.extend(self.compress(&header_block(headers))?);
                control(SYN_REPLY, fin(*f), body)
            }
            Frame::RstStream { id, status } => {
                let mut body = (id & 0x7fff_ffff).to_be_bytes().to_vec();
                body.extend_from_slice(&status.to_be_bytes());
                control(RST_STREAM, 0, body)
            }
            Frame::Ping(id) => control(PING, 0, id.to_be_bytes().to_vec()),
            Frame::GoAway { last } => {
                let mut body = (last & 0x7fff_ffff).to_be_bytes().to_vec();
                body.extend_from_slice(&0u32.to_be_bytes());
                control(GOAWAY, 0, body)
            }
            Frame::Headers { .. } | Frame::Ignored => Err(protocol("not a frame this side writes")),
            Frame::Data { id, data, fin: f } => {
                let len =
                    u32::try_from(data.len()).ok().filter(|l| *l < 1 << 24).ok_or_else(|| protocol("data too long"))?;
                let mut out = Vec::with_capacity(8 + data.len());
                out.extend_from_slice(&(id & 0x7fff_ffff).to_be_bytes());
                out.extend_from_slice(&(u32::from(fin(*f)) << 24 | len).to_be_bytes());
                out.extend_from_slice(data);
                Ok(out)
            }
        }
    }
}

/// Reads frames and decompresses their header blocks.
pub(crate) struct Decoder {
    z: flate2::Decompress,
}

impl Decoder {
    pub(crate) fn new() -> Decoder {
        Decoder { z: flate2::Decompress::new(true) }
    }

    fn decompress(&mut self, mut input: &[u8]) -> Result<Vec<u8>, SpdyError> {
        let mut out = Vec::with_capacity(1024);
        loop {
            out.reserve(1024);
            let before = self.z.total_in();
            match self.z.decompress_vec(input, &mut out, flate2::FlushDecompress::Sync) {
                Ok(_) => {}
                Err(e) if e.needs_dictionary().is_some() => {
                    self.z.set_dictionary(DICTIONARY).map_err(|e| protocol(format!("header dictionary: {e}")))?;
                }
                Err(e) => return Err(protocol(format!("decompressing headers: {e}"))),
            }
            let used = usize::try_from(self.z.total_in() - before).unwrap_or(input.len());
            input = &input[used..];
            if out.len() > MAX_HEADER_BLOCK {
                return Err(protocol(format!("a header block over {MAX_HEADER_BLOCK} bytes")));
            }
            if input.is_empty() && out.len() < out.capacity() {
                return Ok(out);
            }
        }
    }

    /// The next frame from `io`; `None` at a clean end between frames.
    pub(crate) async fn read<R: AsyncRead + Unpin>(&mut self, io: &mut R) -> Result<Option<Frame>, SpdyError> {
        let mut head = [0u8; 8];
        match io.read_exact(&mut head[..1]).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e.into()),
        }
        io.read_exact(&mut head[1..]).await?;
        let flags = head[4];
        let len = usize::from(head[5]) << 16 | usize::from(head[6]) << 8 | usize::from(head[7]);
        if len > MAX_FRAME {
            return Err(protocol(format!("a frame of {len} bytes (at most {MAX_FRAME})")));
        }
        let mut body = vec![0u8; len];
        io.read_exact(&mut body).await?;
        let fin = flags & FLAG_FIN != 0;
        let word = |b: &[u8], at: usize| -> Result<u32, SpdyError> {
            b.get(at..at + 4)
                .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
                .ok_or_else(|| protocol("a frame shorter than its type"))
        };
        if head[0] & 0x80 == 0 {
            let id = word(&head, 0)? & 0x7fff_ffff;
            return Ok(Some(Frame::Data { id, data: body, fin }));
        }
        let version = u16::from_be_bytes([head[0] & 0x7f, head[1]]);
        if version != VERSION {
            return Err(protocol(format!("version {version} (this side speaks {VERSION})")));
        }
        let kind = u16::from_be_bytes([head[2], head[3]]);
        Ok(Some(match kind {
            SYN_STREAM => {
                let id = word(&body, 0)? & 0x7fff_ffff;
                let block = body.get(10..).ok_or_else(|| protocol("a short SYN_STREAM"))?;
                Frame::SynStream { id, headers: parse_header_block(&self.decompress(block)?)?, fin }
            }
            SYN_REPLY => {
                let id = word(&body, 0)? & 0x7fff_ffff;
                let block = body.get(4..).unwrap_or_default();
                Frame::SynReply { id, headers: parse_header_block(&self.decompress(block)?)?, fin }
            }
            HEADERS => {
                let id = word(&body, 0)? & 0x7fff_ffff;
                // Decompressed all the same: the zlib stream runs across every block.
                self.decompress(body.get(4..).unwrap_or_default())?;
                Frame::Headers { id }
            }
            RST_STREAM => Frame::RstStream { id: word(&body, 0)? & 0x7fff_ffff, status: word(&body, 4)? },
            PING => Frame::Ping(word(&body, 0)?),
            GOAWAY => Frame::GoAway { last: word(&body, 0)? & 0x7fff_ffff },
            SETTINGS | WINDOW_UPDATE => Frame::Ignored,
            _ => Frame::Ignored,
        }))
    }
}

/// What the connection's reader keeps of an open stream.
struct Slot {
    data: Option<mpsc::Sender<Vec<u8>>>,
    reply: Option<oneshot::Sender<Result<(), SpdyError>>>,
}

type Slots = Arc<Mutex<HashMap<u32, Slot>>>;

fn locked(s: &Slots) -> std::sync::MutexGuard<'_, HashMap<u32, Slot>> {
    s.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The client side of a SPDY connection: streams are opened on it; its reading and writing
/// run as tasks until the peer closes it or every handle is dropped.
pub struct Connection {
    out: mpsc::Sender<Frame>,
    slots: Slots,
    next_id: std::sync::atomic::AtomicU32,
    ended: tokio::sync::watch::Receiver<bool>,
}

/// A stream's data from the peer, until its FIN (or the connection's end).
pub struct StreamReader {
    rx: mpsc::Receiver<Vec<u8>>,
}

impl StreamReader {
    /// The next chunk; `None` once the peer has closed its side.
    pub async fn next(&mut self) -> Option<Vec<u8>> {
        self.rx.recv().await
    }
}

/// This side of a stream: data written to the peer, then a FIN.
pub struct StreamWriter {
    id: u32,
    out: mpsc::Sender<Frame>,
}

impl StreamWriter {
    /// Writes `data` (in frames of at most [`MAX_DATA`]).
    pub async fn write(&self, data: &[u8]) -> Result<(), SpdyError> {
        for chunk in data.chunks(MAX_DATA) {
            let frame = Frame::Data { id: self.id, data: chunk.to_vec(), fin: false };
            self.out.send(frame).await.map_err(|_| SpdyError::Closed)?;
        }
        Ok(())
    }

    /// Closes this side (an empty data frame with FIN): the peer reads its end.
    pub async fn close(&self) -> Result<(), SpdyError> {
        self.out.send(Frame::Data { id: self.id, data: Vec::new(), fin: true }).await.map_err(|_| SpdyError::Closed)
    }
}

impl Connection {
    /// Runs the connection over `io` (already upgraded).
    pub fn start<T>(io: T) -> Result<Connection, SpdyError>
    where
        T: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (mut reader, mut writer) = tokio::io::split(io);
        let (out, mut frames) = mpsc::channel::<Frame>(64);
        let slots: Slots = Arc::default();
        let (ended_tx, ended) = tokio::sync::watch::channel(false);
        let mut encoder = Encoder::new()?;
        podpass_serve::spawn_named("spdy-write", async move {
            while let Some(frame) = frames.recv().await {
                let Ok(bytes) = encoder.encode(&frame) else { break };
                if writer.write_all(&bytes).await.is_err() || writer.flush().await.is_err() {
                    break;
                }
            }
            let _ = writer.shutdown().await;
        });
        let (read_slots, pong) = (Arc::clone(&slots), out.clone());
        podpass_serve::spawn_named("spdy-read", async move {
            let mut decoder = Decoder::new();
            let result = read_loop(&mut decoder, &mut reader, &read_slots, &pong).await;
            if let Err(e) = &result {
                tracing::debug!(error = %e, "spdy connection ended");
            }
            // Every stream ends with the connection; anyone waiting on a reply hears so.
            for (_, slot) in locked(&read_slots).drain() {
                if let Some(reply) = slot.reply {
                    let _ = reply.send(Err(SpdyError::Closed));
                }
            }
            let _ = ended_tx.send(true);
        });
        Ok(Connection { out, slots, next_id: std::sync::atomic::AtomicU32::new(1), ended })
    }

    /// Opens a stream with `headers` and waits for the peer's reply.
    pub async fn open(&self, headers: &[(&str, &str)]) -> Result<(StreamWriter, StreamReader), SpdyError> {
        let id = self.next_id.fetch_add(2, std::sync::atomic::Ordering::Relaxed);
        let (data_tx, rx) = mpsc::channel(STREAM_BUFFER);
        let (reply_tx, reply) = oneshot::channel();
        locked(&self.slots).insert(id, Slot { data: Some(data_tx), reply: Some(reply_tx) });
        let headers = headers.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect();
        self.out.send(Frame::SynStream { id, headers, fin: false }).await.map_err(|_| SpdyError::Closed)?;
        reply.await.map_err(|_| SpdyError::Closed)??;
        Ok((StreamWriter { id, out: self.out.clone() }, StreamReader { rx }))
    }

    /// Waits until the peer has closed the connection.
    pub async fn closed(&self) {
        let mut ended = self.ended.clone();
        let _ = ended.wait_for(|e| *e).await;
    }

    /// Says goodbye (GOAWAY); the peer then closes the connection.
    pub async fn go_away(&self) {
        let _ = self.out.send(Frame::GoAway { last: 0 }).await;
    }
}

async fn read_loop<R: AsyncRead + Unpin>(
    decoder: &mut Decoder,
    reader: &mut R,
    slots_of: &Slots,
    out: &mpsc::Sender<Frame>,
) -> Result<(), SpdyError> {
    while let Some(frame) = decoder.read(reader).await? {
        match frame {
            Frame::Data { id, data, fin } => {
                let sender = locked(slots_of).get(&id).and_then(|s| s.data.clone());
                if let Some(sender) = sender
                    && !data.is_empty()
                {
                    // A reader that went away no longer wants its data; the others do.
                    let _ = sender.send(data).await;
                }
                if fin && let Some(slot) = locked(slots_of).get_mut(&id) {
                    slot.data = None;
                }
            }
            Frame::SynReply { id, fin, .. } => {
                let mut all = locked(slots_of);
                if let Some(slot) = all.get_mut(&id) {
                    if let Some(reply) = slot.reply.take() {
                        let _ = reply.send(Ok(()));
                    }
                    if fin {
                        slot.data = None;
                    }
                }
            }
            Frame::RstStream { id, status } => {
                if let Some(slot) = locked(slots_of).remove(&id)
                    && let Some(reply) = slot.reply
                {
                    let _ = reply.send(Err(SpdyError::Reset { id, status }));
                }
            }
            // The client opens every stream of a Kubernetes stream protocol.
            Frame::SynStream { id, .. } => {
                let _ = out.send(Frame::RstStream { id, status: REFUSED_STREAM }).await;
            }
            Frame::Ping(id) => {
                let _ = out.send(Frame::Ping(id)).await;
            }
            Frame::GoAway { .. } => return Ok(()),
            Frame::Headers { .. } | Frame::Ignored => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dictionary_is_the_drafts() {
        assert_eq!(DICTIONARY.len(), 1423);
        let mut a: u32 = 1;
        let mut b: u32 = 0;
        for &byte in DICTIONARY {
            a = (a + u32::from(byte)) % 65521;
            b = (b + a) % 65521;
        }
        assert_eq!(b << 16 | a, 0xe3c6_a7c2, "Adler-32");
    }

    #[tokio::test]
    async fn frames_round_trip_with_headers_compressed_across_blocks() {
        let mut enc = Encoder::new().unwrap_or_else(|e| panic!("{e}"));
        let frames = vec![
            Frame::SynStream { id: 1, headers: vec![("streamtype".into(), "error".into())], fin: false },
            Frame::SynStream { id: 3, headers: vec![("streamtype".into(), "stdin".into())], fin: false },
            Frame::SynReply { id: 3, headers: vec![], fin: true },
            Frame::Data { id: 3, data: b"hello".to_vec(), fin: false },
            Frame::Data { id: 3, data: Vec::new(), fin: true },
            Frame::RstStream { id: 5, status: 3 },
            Frame::Ping(7),
            Frame::GoAway { last: 0 },
        ];
        let mut wire = Vec::new();
        for f in &frames {
            wire.extend(enc.encode(f).unwrap_or_else(|e| panic!("{e}")));
        }
        let mut dec = Decoder::new();
        let mut io = &wire[..];
        for f in &frames {
            assert_eq!(dec.read(&mut io).await.unwrap_or_else(|e| panic!("{e}")).as_ref(), Some(f));
        }
        assert_eq!(dec.read(&mut io).await.unwrap_or_else(|e| panic!("{e}")), None);
    }

    #[tokio::test]
    async fn hostile_frames_are_refused_not_believed() {
        let mut dec = Decoder::new();
        // A data frame claiming 16 MiB.
        let mut io: &[u8] = &[0, 0, 0, 1, 0, 0xff, 0xff, 0xff];
        assert!(matches!(dec.read(&mut io).await, Err(SpdyError::Protocol(_))));
        // Another version.
        let mut io: &[u8] = &[0x80, 2, 0, 6, 0, 0, 0, 4, 0, 0, 0, 1];
        assert!(matches!(dec.read(&mut io).await, Err(SpdyError::Protocol(_))));
        // A header block naming more pairs than it holds, or too many.
        assert!(parse_header_block(&[0, 0, 0, 1, 0, 0, 0, 9, b'a']).is_err());
        assert!(parse_header_block(&[0, 0, 1, 0]).is_err());
        // Cut short mid-frame.
        let mut io: &[u8] = &[0x80, 3, 0, 6, 0, 0, 0, 4, 0];
        assert!(matches!(dec.read(&mut io).await, Err(SpdyError::Io(_))));
    }
}
