// Package media turns the images and videos of a vision-language request
// into pixels, safely: it owns reading a part's source (base64 data URL,
// raw base64, or an opt-in http(s) fetch), recognising its format,
// decoding it to packed RGB under fixed bounds, and hashing the pixels;
// and resizing pixels exactly as PIL does (Resize), for the vision
// towers' preprocessing.
//
// # Formats
//
// Images: JPEG, PNG, GIF (first frame) and WebP, decoded by the standard
// library and golang.org/x/image/webp. Video: MP4/QuickTime and
// WebM/Matroska, decoded by an external ffmpeg (scripts/setup_ffmpeg.sh
// installs one at .deps/ffmpeg/bin/ffmpeg; LocateFFmpeg finds it); a
// server without ffmpeg refuses video with ReasonVideoUnavailable. A video
// is sampled to at most MaxFrames frames, uniformly in time.
//
// The bytes' signature decides the format, never the declared media type:
// a data URL that declares a type naming another format is refused
// (ReasonFormatMismatch), and bytes with no known signature are refused
// whatever they declare. Bytes after a complete image are ignored, so a
// polyglot decodes as the image it starts with or not at all.
//
// # Limits
//
// Limits bound every cost; its zero value is the defaults: 25 MiB encoded
// per item, 100 Mpx per image or frame, 384 Mpx per request, 16 images and
// 8 videos per request, 600 s of video, 32 frames a video, 60 s of ffmpeg
// time a video, 10 s a fetch. Remote sources are refused unless
// AllowRemote.
//
// # Invariants
//
//   - No pixel buffer is allocated before the header's declared size has
//     passed MaxPixels and the request's remaining pixel budget (for WebP
//     the bitstream's size, which the decoder allocates by, not only the
//     extended header's); base64 is never decoded past MaxBytes+1 bytes.
//   - Every refusal is an *Error with a Reason from a closed set whose text
//     is fixed: no error text quotes the media, its source or a decoder's
//     message (those travel in Error.Err, for errors.As only).
//   - A context that ends is returned as the context's error, never as a
//     refusal: a client that went away is not a bad request.
//   - Image.Hash depends only on the dimensions and the RGB pixels: the
//     same picture in two formats hashes alike, two pictures differ.
//   - The scratch file a video is written to for ffmpeg is removed before
//     DecodeVideo returns, on every path; ffmpeg is given the demuxer, may
//     open only files, and its output is read under the pixel bounds.
//
// # Imports
//
// media depends on the standard library and golang.org/x/image only. It
// never imports engine, stages or server: stages.MediaDecode calls it and
// maps its refusals to request errors.
package media
