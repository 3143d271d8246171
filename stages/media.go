package stages

import "context"

// The multimodal stages are explicit seams: they sit in the pipeline now so
// that media support replaces their bodies without rewiring anything.

// MediaDecode fetches and decodes the request's media. No model has a
// vision tower yet, so media is refused (400 unsupported_media) rather
// than silently dropped.
type MediaDecode struct{}

// Name implements Stage.
func (MediaDecode) Name() string { return "media" }

// Apply implements Stage.
func (MediaDecode) Apply(_ context.Context, req *Request) error {
	if len(req.Params.Media) > 0 {
		return invalid(CodeUnsupportedMedia, "messages")
	}
	return nil
}

// VisionTower encodes decoded media into features. Nothing reaches it yet.
type VisionTower struct{}

// Name implements Stage.
func (VisionTower) Name() string { return "vision" }

// Apply implements Stage.
func (VisionTower) Apply(context.Context, *Request) error { return nil }

// SpanCarve pairs placeholder runs in the prompt with media features, one
// span per image or frame. A text prompt has none.
type SpanCarve struct{}

// Name implements Stage.
func (SpanCarve) Name() string { return "spans" }

// Apply implements Stage.
func (SpanCarve) Apply(_ context.Context, req *Request) error {
	req.Spans = nil
	return nil
}
