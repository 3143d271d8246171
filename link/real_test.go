package link

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/benbjohnson/clock"

	"github.com/goprovider/provider/engine"
	"github.com/goprovider/provider/engine/enginetest"
	"github.com/goprovider/provider/graph"
	"github.com/goprovider/provider/server"
)

// TestRealModelThroughLink: a greedy completion of a real model (stories260K)
// asked through the link, sealed and streamed back in encrypted chunks, is
// byte for byte what the same server answers over plain HTTP (the request
// id and clock are fixed so that the two answers can be compared whole).
func TestRealModelThroughLink(t *testing.T) {
	e, m := enginetest.Start(t, enginetest.Stories(), engine.Options{})
	srv := server.New(server.Options{Graph: graph.Options{Clock: clock.NewMock(), MintID: func() string { return "fixed" }}})
	t.Cleanup(srv.Close)
	err := srv.Register(server.Model{Name: "stories", Architecture: m.Config.Arch, Tokenizer: m.Tokenizer, EOS: m.Config.EOS,
		ContextLength: m.Config.ContextLength, Generator: e})
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, srv, nil)
	p := h.coord.accept()
	c := newClient(t, p.greeted().PublicKey)

	body := `{"model":"stories","prompt":"Once upon a time","max_tokens":24,"stream":true,"stream_options":{"include_usage":true}}`
	// The coordinator names the endpoint in the body; the link strips it.
	p.send(c.request("req-real", `{"endpoint":"/v1/completions",`+body[1:]))
	p.expect(typeAccepted)
	var chunks [][]byte
	var done completeMsg
	for {
		msg := p.nextSkipping()
		if msg.Type == typeChunk {
			chunks = append(chunks, c.open(msg))
			continue
		}
		if msg.Type != typeComplete {
			t.Fatalf("got %s: %s", msg.Type, msg.raw)
		}
		msg.decode(t, &done)
		break
	}
	status, local := localAnswer(t, srv, "/v1/completions", body)
	if status != http.StatusOK {
		t.Fatalf("local status %d: %s", status, local)
	}
	if got := throughCoordinator(chunks); !bytes.Equal(got, local) {
		t.Errorf("through the link:\n%s\nover HTTP:\n%s", got, local)
	}
	if done.Usage.CompletionTokens != 24 || done.Usage.PromptTokens == 0 {
		t.Errorf("usage %+v, want 24 completion tokens and the prompt's", done.Usage)
	}
}
