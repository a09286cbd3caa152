//! `file_read_media`: an image or audio file for a model to see or hear, read like `file_read`
//! reads text (a regular file with one name, the object planned, no links) and returned base64
//! with its MIME type, which is read from its first bytes, never from its name: a `.png` that
//! holds text is refused, one that holds a JPEG is a JPEG. Only the types MCP clients show.

use base64::Engine;
use glovebox_proto::ErrorCode;
use glovebox_proto::tools::{FileReadMediaParams, MAX_MEDIA_BYTES};
use glovebox_proto::v1::TicketBody;
use serde_json::json;

use crate::approved::open_approved_file;
use crate::context::{Done, OpContext};
use crate::error::OpError;
use crate::fsio;

/// The MIME types returned, by what the bytes are (as `infer` names them), with the block kind.
const KNOWN: &[(&str, &str, &str)] = &[
    ("image/png", "image", "image/png"),
    ("image/jpeg", "image", "image/jpeg"),
    ("image/gif", "image", "image/gif"),
    ("image/webp", "image", "image/webp"),
    ("audio/x-wav", "audio", "audio/wav"),
    ("audio/mpeg", "audio", "audio/mpeg"),
    ("audio/ogg", "audio", "audio/ogg"),
    ("audio/x-flac", "audio", "audio/flac"),
];

/// What `bytes` are, as (`image` or `audio`, MIME type), if a type this tool returns.
pub fn sniff(bytes: &[u8]) -> Option<(&'static str, &'static str)> {
    let found = infer::get(bytes)?;
    KNOWN
        .iter()
        .find(|(seen, _, _)| *seen == found.mime_type())
        .map(|(_, kind, mime)| (*kind, *mime))
}

pub fn execute(
    ctx: &OpContext<'_>,
    p: &FileReadMediaParams,
    ticket: &TicketBody,
) -> Result<Done, OpError> {
    let (path, fd, stat) = open_approved_file(ctx, &p.path, ticket)?;
    let bytes = fsio::read_capped(fd, &stat, MAX_MEDIA_BYTES, &p.path).map_err(|e| {
        if e.code == ErrorCode::TooLarge {
            OpError::new(
                ErrorCode::TooLarge,
                format!("{} is larger than {MAX_MEDIA_BYTES} bytes", p.path),
            )
        } else {
            e
        }
    })?;
    let Some((kind, mime)) = sniff(&bytes) else {
        let what = infer::get(&bytes).map_or("of no type it knows", |t| t.mime_type());
        return Err(OpError::new(
            ErrorCode::InvalidParams,
            format!(
                "{} is {what} by its content; file_read_media reads PNG, JPEG, GIF and WebP images and WAV, MP3, OGG and FLAC audio",
                p.path
            ),
        ));
    };
    let n = bytes.len() as u64;
    Ok(Done::new(
        &json!({
            "path": path,
            "kind": kind,
            "mime_type": mime,
            "bytes": n,
            "data": base64::engine::general_purpose::STANDARD.encode(&bytes),
        }),
        n,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approved::read_plan;
    use crate::testing::{Fixture, ticket_for};

    /// The smallest PNG: a 1×1 transparent pixel.
    pub const PNG: &[u8] = &[
        0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x48, 0x44,
        0x52, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1F,
        0x15, 0xC4, 0x89, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9C, 0x63, 0x00,
        0x01, 0x00, 0x00, 0x05, 0x00, 0x01, 0x0D, 0x0A, 0x2D, 0xB4, 0x00, 0x00, 0x00, 0x00, 0x49,
        0x45, 0x4E, 0x44, 0xAE, 0x42, 0x60, 0x82,
    ];

    fn media(f: &Fixture, name: &str) -> Result<serde_json::Value, OpError> {
        let plan = read_plan(&f.ctx(), name)?;
        let p = FileReadMediaParams { path: name.into() };
        execute(&f.ctx(), &p, &ticket_for(&plan)).map(|d| d.value())
    }

    #[test]
    fn the_type_comes_from_the_bytes_never_the_name() {
        let f = Fixture::new();
        std::fs::write(f.work.join("pixel.png"), PNG).unwrap();
        std::fs::write(f.work.join("photo.jpg"), PNG).unwrap();
        std::fs::write(f.work.join("fake.png"), "just text, named like a picture").unwrap();
        let r = media(&f, "pixel.png").unwrap();
        assert_eq!(
            (&r["kind"], &r["mime_type"]),
            (&json!("image"), &json!("image/png"))
        );
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().unwrap())
            .unwrap();
        assert_eq!(decoded, PNG);
        assert_eq!(media(&f, "photo.jpg").unwrap()["mime_type"], "image/png");
        let e = media(&f, "fake.png").unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidParams);
        assert!(e.message.contains("no type it knows"), "{}", e.message);
    }

    #[test]
    fn only_the_types_clients_show_and_a_bounded_size() {
        let wav = [b"RIFF".as_slice(), &[0; 4], b"WAVEfmt "].concat();
        assert_eq!(sniff(&wav), Some(("audio", "audio/wav")));
        assert_eq!(sniff(b"%PDF-1.7\n"), None, "a PDF is not an image");
        assert_eq!(sniff(b"\x7fELF\x02\x01\x01"), None);
        let f = Fixture::new();
        let mut big = PNG.to_vec();
        big.resize(MAX_MEDIA_BYTES as usize + 1, 0);
        std::fs::write(f.work.join("big.png"), big).unwrap();
        assert_eq!(media(&f, "big.png").unwrap_err().code, ErrorCode::TooLarge);
    }
}
