package media

import "time"

// Limits bound what decoding may cost. A zero field takes its default, so
// the zero Limits is the defaults; there is no way to say "none allowed"
// other than refusing the media before it gets here.
type Limits struct {
	// MaxBytes bounds one item's encoded bytes (after base64).
	// Default 25 MiB.
	MaxBytes int64
	// MaxPixels bounds one image or video frame, width x height, checked
	// against the header's declared size before any pixel is allocated.
	// Default 100 Mpx.
	MaxPixels int64
	// MaxRequestPixels bounds the pixels of all images and frames of one
	// request. Default 384 Mpx.
	MaxRequestPixels int64
	// MaxImages and MaxVideos bound the items of one request.
	// Defaults 16 and 8.
	MaxImages int
	MaxVideos int
	// MaxDuration bounds a video's declared duration. Default 600 s.
	MaxDuration time.Duration
	// MaxFrames bounds the frames sampled from one video. Default 32.
	MaxFrames int
	// VideoTimeout bounds ffmpeg's wall time for one video, probe and
	// frames together. Default 60 s.
	VideoTimeout time.Duration
	// AllowRemote lets http and https sources be fetched. Off by default:
	// a fetch reaches whatever the server's host can reach, and makes
	// decoding depend on the network (a replay may differ).
	AllowRemote bool
	// FetchTimeout bounds one remote fetch. Default 10 s.
	FetchTimeout time.Duration
}

// Default limits.
const (
	DefaultMaxBytes         = 25 << 20
	DefaultMaxPixels        = 100_000_000
	DefaultMaxRequestPixels = 384_000_000
	DefaultMaxImages        = 16
	DefaultMaxVideos        = 8
	DefaultMaxDuration      = 600 * time.Second
	DefaultMaxFrames        = 32
	DefaultVideoTimeout     = 60 * time.Second
	DefaultFetchTimeout     = 10 * time.Second
)

// withDefaults returns l with every zero (or negative) bound replaced by
// its default.
func (l Limits) withDefaults() Limits {
	def(&l.MaxBytes, DefaultMaxBytes)
	def(&l.MaxPixels, DefaultMaxPixels)
	def(&l.MaxRequestPixels, DefaultMaxRequestPixels)
	def(&l.MaxImages, DefaultMaxImages)
	def(&l.MaxVideos, DefaultMaxVideos)
	def(&l.MaxDuration, DefaultMaxDuration)
	def(&l.MaxFrames, DefaultMaxFrames)
	def(&l.VideoTimeout, DefaultVideoTimeout)
	def(&l.FetchTimeout, DefaultFetchTimeout)
	return l
}

func def[T int | int64 | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}
