// Package deploy holds the files that run `provider serve` as a service:
// provider.service (systemd) and com.goprovider.provider.plist (launchd),
// described in README.md. It has no code; its tests check the files: the
// unit with systemd-analyze (verify, and its offline security review), the
// property list's XML and structure, and that both start the binary
// `make install PREFIX=/usr/local` installs.
package deploy
