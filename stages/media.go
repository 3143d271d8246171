package stages

import (
	"context"
	"errors"
	"fmt"

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
	if req.Model == nil || req.Model.Vision == nil {
		return invalid(CodeUnsupportedMedia, "messages")
	}
	parts := make([]media.Part, len(req.Params.Media))
	for i, m := range req.Params.Media {
		switch {
		case m.Kind == "image":
			parts[i] = media.Part{Kind: media.KindImage, Src: m.URL}
		case m.Kind == "video" && req.Model.Vision.Video():
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

// ErrVision: the vision tower failed on media that decoded: the server's
// fault (503 vlm_extraction_failed), never the request's.
var ErrVision = errors.New("vision tower failed")

// VisionTower runs the model's tower (Model.Vision) on the request's
// decoded images and videos' frames, in prompt order (the order of
// Params.Media), into Request.MediaItems: one item per image or frame,
// with its soft tokens.
type VisionTower struct{}

// Name implements Stage.
func (VisionTower) Name() string { return "vision" }

// Apply implements Stage.
func (VisionTower) Apply(ctx context.Context, req *Request) error {
	req.MediaItems = nil
	if len(req.Images) == 0 && len(req.Videos) == 0 {
		return nil
	}
	v := req.Model.Vision
	vv, _ := v.(VideoVision)
	if v == nil || len(req.Videos) > 0 && (vv == nil || !v.Video()) {
		// MediaDecode refuses both; this is a misuse of the stages.
		return fmt.Errorf("%w: media for a model without a tower for it", ErrVision)
	}
	items := make([]MediaItem, 0, len(req.Images))
	add := func(it MediaItem, err error) error {
		var inv *Invalid
		switch {
		case errors.As(err, &inv), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
			return err
		case err != nil:
			return fmt.Errorf("%w: %w", ErrVision, err)
		}
		items = append(items, it)
		return nil
	}
	if len(req.Videos) == 0 {
		for _, img := range req.Images {
			if err := add(v.Encode(ctx, img)); err != nil {
				return err
			}
		}
		req.MediaItems = items
		return nil
	}
	// Images and videos interleave as their parts do.
	var images, videos int
	for _, m := range req.Params.Media {
		switch {
		case m.Kind == "image" && images < len(req.Images):
			if err := add(v.Encode(ctx, req.Images[images])); err != nil {
				return err
			}
			images++
		case m.Kind == "video" && videos < len(req.Videos):
			for _, fr := range req.Videos[videos] {
				if err := add(vv.EncodeFrame(ctx, fr)); err != nil {
					return err
				}
			}
			videos++
		default:
			return fmt.Errorf("%w: media part %d (%s) has no decoded media", ErrVision, images+videos, m.Kind)
		}
	}
	if images != len(req.Images) || videos != len(req.Videos) {
		return fmt.Errorf("%w: %d images and %d videos decoded for the parts' %d and %d", ErrVision, len(req.Images), len(req.Videos), images, videos)
	}
	req.MediaItems = items
	return nil
}

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
