module github.com/goprovider/provider

go 1.26.8

require (
	github.com/benbjohnson/clock v1.3.5 // indirect
	github.com/reugn/go-streams v0.13.0 // indirect
	github.com/vmihailenco/msgpack/v5 v5.4.1 // indirect
	github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
)
