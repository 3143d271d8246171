package stages

import (
	"context"
	"errors"

	"github.com/goprovider/provider/media"
)

// MediaDecode decodes the request's images and videos (package media) into
// Request.Images and Request.Videos. A model without a vision tower has its
// media refused (400 unsupported_media) rather than silently dropped.
//
// Decoding is deterministic, so a replay decodes alike, except where it
// meets the world: a fetch (Limits.AllowRemote) depends on the network and
// a video's decoding on Limits.VideoTimeout.
type MediaDecode struct {
	// Limits bound what one request's media may cost; zero fields take
	// package media's defaults.
	Limits media.Limits
	// FFmpeg decodes video; its zero value looks for the binary when a
	// video arrives (media.LocateFFmpeg) and refuses video without one.
	FFmpeg media.FFmpeg
}

// Name implements Stage.
func (MediaDecode) Name() string { return "media" }

// Apply implements Stage.
func (s MediaDecode) Apply(ctx context.Context, req *Request) error {
	req.Images, req.Videos = nil, nil
	if len(req.Params.Media) == 0 {
		return nil
	}
	if req.Model == nil || !req.Model.Vision {
		return invalid(CodeUnsupportedMedia, "messages")
	}
	parts := make([]media.Part, len(req.Params.Media))
	for i, m := range req.Params.Media {
		switch m.Kind {
		case "image":
			parts[i] = media.Part{Kind: media.KindImage, Src: m.URL}
		case "video":
			parts[i] = media.Part{Kind: media.KindVideo, Src: m.URL}
		default:
			return invalid(CodeUnsupportedMedia, "messages")
		}
	}
	d, err := media.Decode(ctx, parts, s.Limits, s.FFmpeg)
	var me *media.Error
	if errors.As(err, &me) {
		return &Invalid{Code: mediaCode(me.Reason), Param: "messages", Err: err}
	}
	if err != nil {
		return err
	}
	req.Images, req.Videos = d.Images, d.Videos
	return nil
}

// mediaCode classifies a media refusal: media of a kind or format this
// server cannot decode is unsupported; anything else is an invalid value.
func mediaCode(r media.Reason) Code {
	switch r {
	case media.ReasonUnsupportedFormat, media.ReasonUnsupportedVideo,
		media.ReasonVideoUnavailable, media.ReasonRemoteRefused:
		return CodeUnsupportedMedia
	}
	return CodeInvalidValue
}

// VisionTower and SpanCarve are explicit seams: they sit in the pipeline
// now so that vision support replaces their bodies without rewiring
// anything.

// VisionTower encodes decoded media into features. Nothing reaches it yet.
type VisionTower struct{}

// Name implements Stage.
func (VisionTower) Name() string { return "vision" }

// Apply implements Stage.
func (VisionTower) Apply(context.Context, *Request) error { return nil }

// SpanCarve pairs placeholder runs in the prompt with the vision tower's
// media items (CarveSpans), one span per image or frame. A text prompt has
// none.
type SpanCarve struct{}

// Name implements Stage.
func (SpanCarve) Name() string { return "spans" }

// Apply implements Stage.
func (SpanCarve) Apply(_ context.Context, req *Request) error {
	req.Spans = nil
	if len(req.MediaItems) == 0 {
		return nil
	}
	spans, err := CarveSpans(req.Tokens, req.MediaItems)
	if err != nil {
		return err
	}
	req.Spans = spans
	return nil
}
