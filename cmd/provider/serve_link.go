package main

import (
	"context"
	"log/slog"
	"net/http"
	"runtime/debug"

	"github.com/goprovider/provider/link"
	"github.com/goprovider/provider/slots"
)

// startLink joins the coordinator's network at url in the background:
// requests from the network run through h (the server without its auth
// layer), keys live in keyDir. stop ends the link and returns once its
// requests and model loads have returned.
func startLink(ctx context.Context, url string, h http.Handler, keyDir string, models func() []link.ModelInfo, capacity func() []slots.Snapshot, load func(context.Context, string) error, log *slog.Logger) (stop func()) {
	if log == nil {
		log = slog.Default()
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := link.Run(ctx, link.Options{
			URL:       url,
			Handler:   h,
			KeyDir:    keyDir,
			Models:    models,
			Capacity:  capacity,
			LoadModel: load,
			Version:   buildVersion(),
			Logger:    log,
		})
		if err != nil {
			log.Error("coordinator link not started", "error", err)
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// buildVersion is the provider's module version, or "devel" for a build
// from a working tree.
func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}
