package media

import "context"

// Kind is what a part holds.
type Kind uint8

// Kinds.
const (
	KindImage Kind = iota + 1
	KindVideo
)

// Part is one media part of a request, not yet decoded: Src is read as
// DecodeImage reads it.
type Part struct {
	Kind Kind
	Src  string
}

// Decoded is a request's media: each list in the order of its kind's
// parts.
type Decoded struct {
	Images []*Image
	// Videos holds each video's sampled frames.
	Videos [][]Frame
}

// Decode decodes a request's parts in order under lim, whose per-request
// bounds apply to the parts together: the counts are checked before any
// part is decoded, and each part may use only the pixels the parts before
// it left of MaxRequestPixels. It stops at the first refusal.
func Decode(ctx context.Context, parts []Part, lim Limits, ff FFmpeg) (Decoded, error) {
	lim = lim.withDefaults()
	var images, videos int
	for _, p := range parts {
		switch p.Kind {
		case KindImage:
			images++
		case KindVideo:
			videos++
		default:
			return Decoded{}, refuse(ReasonUnsupportedFormat, nil)
		}
	}
	if images > lim.MaxImages {
		return Decoded{}, refuse(ReasonTooManyImages, nil)
	}
	if videos > lim.MaxVideos {
		return Decoded{}, refuse(ReasonTooManyVideos, nil)
	}
	var d Decoded
	left := lim.MaxRequestPixels
	for _, p := range parts {
		if err := ctx.Err(); err != nil {
			return Decoded{}, err
		}
		if p.Kind == KindImage {
			b, declared, err := load(ctx, p.Src, lim)
			if err != nil {
				return Decoded{}, err
			}
			img, err := decodeImage(b, declared, lim, left)
			if err != nil {
				return Decoded{}, err
			}
			left -= int64(img.Width) * int64(img.Height)
			d.Images = append(d.Images, img)
			continue
		}
		frames, err := decodeVideo(ctx, p.Src, lim, ff, left)
		if err != nil {
			return Decoded{}, err
		}
		for _, f := range frames {
			left -= int64(f.Image.Width) * int64(f.Image.Height)
		}
		d.Videos = append(d.Videos, frames)
	}
	return d, nil
}
