package media

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"strings"
)

// load returns an item's encoded bytes and the media type its data URL
// declared ("" when it declared none, for raw base64 and fetched items).
// src is a data URL ("data:image/png;base64,..."), raw base64, or, with
// Limits.AllowRemote, an http or https URL. lim has its defaults.
func load(ctx context.Context, src string, lim Limits) ([]byte, string, error) {
	src = strings.TrimSpace(src)
	if len(src) >= 5 && strings.EqualFold(src[:5], "data:") {
		return loadDataURL(src[5:], lim)
	}
	// Base64 has no colon: one means a URL.
	if i := strings.IndexByte(src, ':'); i >= 0 {
		scheme := strings.ToLower(src[:i])
		if !lim.AllowRemote || (scheme != "http" && scheme != "https") {
			return nil, "", refuse(ReasonRemoteRefused, nil)
		}
		b, err := fetch(ctx, src, lim)
		return b, "", err
	}
	b, err := decodeBase64(src, lim.MaxBytes)
	return b, "", err
}

// loadDataURL reads the part of a data URL after "data:". Only base64 data
// URLs are accepted: media in percent-encoding is not worth a second
// decoder.
func loadDataURL(rest string, lim Limits) ([]byte, string, error) {
	header, payload, ok := strings.Cut(rest, ",")
	if !ok {
		return nil, "", refuse(ReasonBadEncoding, nil)
	}
	params := strings.Split(header, ";")
	if len(params) < 2 || !strings.EqualFold(strings.TrimSpace(params[len(params)-1]), "base64") {
		return nil, "", refuse(ReasonBadEncoding, nil)
	}
	declared := strings.ToLower(strings.TrimSpace(params[0]))
	b, err := decodeBase64(payload, lim.MaxBytes)
	return b, declared, err
}

// decodeBase64 decodes standard or URL-safe base64, padded or not, with
// line breaks allowed, refusing output over limit bytes without ever holding
// more than limit+1 of them.
func decodeBase64(s string, limit int64) ([]byte, error) {
	s = strings.TrimRight(strings.TrimSpace(s), "=")
	if s == "" {
		return nil, refuse(ReasonEmpty, nil)
	}
	enc := base64.RawStdEncoding
	if strings.ContainsAny(s, "-_") {
		enc = base64.RawURLEncoding
	}
	size := min(int64(enc.DecodedLen(len(s))), limit+1)
	buf := make([]byte, size)
	dec := base64.NewDecoder(enc, strings.NewReader(s))
	n, err := io.ReadFull(dec, buf)
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		// Line breaks made the bound loose; the stream ended cleanly.
	case err != nil:
		return nil, refuse(ReasonBadEncoding, err)
	case int64(n) > limit:
		return nil, refuse(ReasonTooLarge, nil)
	default:
		// buf is full: the stream must end here, and end valid.
		var one [1]byte
		if m, err := dec.Read(one[:]); m > 0 {
			return nil, refuse(ReasonTooLarge, nil)
		} else if err != nil && !errors.Is(err, io.EOF) {
			return nil, refuse(ReasonBadEncoding, err)
		}
	}
	if n == 0 {
		return nil, refuse(ReasonEmpty, nil)
	}
	return buf[:n], nil
}

// fetch reads a remote item. The response's declared type is ignored: as
// for every source, the bytes' signature decides the format.
func fetch(ctx context.Context, url string, lim Limits) ([]byte, error) {
	fctx, cancel := context.WithTimeout(ctx, lim.FetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(fctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, refuse(ReasonFetchFailed, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, refuse(ReasonFetchFailed, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, refuse(ReasonFetchFailed, nil)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, lim.MaxBytes+1))
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, ctx.Err()
	case err != nil:
		return nil, refuse(ReasonFetchFailed, err)
	case int64(len(b)) > lim.MaxBytes:
		return nil, refuse(ReasonTooLarge, nil)
	case len(b) == 0:
		return nil, refuse(ReasonEmpty, nil)
	}
	return b, nil
}
