package media

// Reason is why media was refused. The set is closed: each reason has one
// fixed message, which never quotes the media or the request.
type Reason uint8

// Reasons.
const (
	// ReasonEmpty: the item decodes to no bytes.
	ReasonEmpty Reason = iota + 1
	// ReasonBadEncoding: neither a base64 data URL nor raw base64.
	ReasonBadEncoding
	// ReasonTooLarge: the encoded item exceeds Limits.MaxBytes.
	ReasonTooLarge
	// ReasonTooManyPixels: an image or frame exceeds Limits.MaxPixels.
	ReasonTooManyPixels
	// ReasonRequestTooLarge: the request's images and frames together
	// exceed Limits.MaxRequestPixels.
	ReasonRequestTooLarge
	// ReasonTooManyImages: more images than Limits.MaxImages.
	ReasonTooManyImages
	// ReasonTooManyVideos: more videos than Limits.MaxVideos.
	ReasonTooManyVideos
	// ReasonUnsupportedFormat: the bytes are no image format we decode, or
	// the declared media type is none we accept.
	ReasonUnsupportedFormat
	// ReasonFormatMismatch: the declared media type names another format
	// than the bytes' signature.
	ReasonFormatMismatch
	// ReasonCorrupt: the image's signature is known but it does not decode.
	ReasonCorrupt
	// ReasonRemoteRefused: the source is a URL and fetching is off (or the
	// scheme is not http or https).
	ReasonRemoteRefused
	// ReasonFetchFailed: fetching a remote source failed.
	ReasonFetchFailed
	// ReasonUnsupportedVideo: the bytes are no container we decode, or it
	// holds no video stream, or its duration is unknown.
	ReasonUnsupportedVideo
	// ReasonCorruptVideo: the container is known but yields no frame.
	ReasonCorruptVideo
	// ReasonVideoTooLong: the video's duration exceeds Limits.MaxDuration.
	ReasonVideoTooLong
	// ReasonVideoTimeout: decoding took longer than Limits.VideoTimeout.
	ReasonVideoTimeout
	// ReasonVideoUnavailable: this server has no ffmpeg to decode video.
	ReasonVideoUnavailable
)

var reasonMessages = [...]string{
	ReasonEmpty:             "empty media",
	ReasonBadEncoding:       "media is not a base64 data URL",
	ReasonTooLarge:          "media too large",
	ReasonTooManyPixels:     "image too large",
	ReasonRequestTooLarge:   "too much media in one request",
	ReasonTooManyImages:     "too many images",
	ReasonTooManyVideos:     "too many videos",
	ReasonUnsupportedFormat: "unsupported image format",
	ReasonFormatMismatch:    "declared media type does not match the content",
	ReasonCorrupt:           "corrupt image",
	ReasonRemoteRefused:     "remote media not allowed",
	ReasonFetchFailed:       "remote media could not be fetched",
	ReasonUnsupportedVideo:  "unsupported video",
	ReasonCorruptVideo:      "corrupt video",
	ReasonVideoTooLong:      "video too long",
	ReasonVideoTimeout:      "video took too long to decode",
	ReasonVideoUnavailable:  "video not supported on this server",
}

// String is the reason's fixed message.
func (r Reason) String() string {
	if int(r) < len(reasonMessages) && reasonMessages[r] != "" {
		return reasonMessages[r]
	}
	return "invalid media"
}

// Error is media that was refused. Its text is the reason's fixed message
// and nothing else; Err is the underlying cause (a decoder's or ffmpeg's
// error), kept for errors.Is/As only: it may describe the media and must
// never reach a client or a log.
type Error struct {
	Reason Reason
	Err    error
}

func (e *Error) Error() string { return "media: " + e.Reason.String() }

// Unwrap exposes the cause.
func (e *Error) Unwrap() error { return e.Err }

func refuse(r Reason, cause error) *Error { return &Error{Reason: r, Err: cause} }
