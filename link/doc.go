// Package link is the provider's side of a coordinator network: one
// WebSocket to the coordinator (provider serve --coordinator
// ws://HOST/ws/provider) over which the provider registers, reports its
// capacity, proves it holds its keys, and answers inference requests by
// running them through its own HTTP handler in process. [Run] owns the
// connection, its reconnection, and every request that arrives on it.
//
// # Protocol, as implemented
//
// Every message is a JSON text frame tagged by "type"; the field names
// are those of the reference coordinator.
//
// Provider to coordinator:
//
//   - register, first on every connection: hardware (memory, cores and
//     processor name from /proc on Linux, from the runtime elsewhere; no
//     GPU or Apple chip figures are claimed), the models with their
//     weight hashes, backend "provider", the version, public_key (the
//     X25519 key, base64), encrypted_response_chunks, privacy
//     capabilities (only the in-process, no-proxy handling of requests is
//     claimed; SIP, anti-debugging, hypervisor and the like are false),
//     and a self-signed attestation blob (below).
//   - heartbeat, right after register and every 5 s: status (serving
//     while a request is in flight, else idle), backend_capacity.slots
//     from the Capacity snapshots (model, state, num_running,
//     num_waiting, active_tokens = TokensUsed, max_tokens_potential =
//     TokensMax), warm_models and active_model (running slots),
//     stats.requests_served and stats.tokens_generated (counted here, from
//     inference_complete), and system metrics (memory pressure and CPU
//     busy share from /proc; thermal state "unknown").
//   - inference_accepted, inference_response_chunk, inference_complete,
//     inference_error: the answer to an inference_request (below).
//   - attestation_response: the answer to attestation_challenge.
//   - load_model_status: "started", then "succeeded" or "failed", for a
//     load_model.
//
// Coordinator to provider: inference_request, cancel,
// attestation_challenge, runtime_status (logged), load_model. Any other
// type, and a message that is not JSON, is logged and dropped.
//
// # Encryption
//
// A request's body arrives as a NaCl box (X25519, XSalsa20-Poly1305)
// sealed to the provider's X25519 key: encrypted_body carries the
// sender's ephemeral public key and base64(24-byte nonce || box). Each
// chunk goes back as a box from the provider's key to that ephemeral key,
// with a fresh nonce, in the same layout; its ephemeral_public_key field
// is the provider's public key, which is what the coordinator checks. A
// request with only a plain body is refused (400,
// request_not_encrypted), as the reference provider refuses it: its
// answer could not be sealed. A box that does not open is refused (400,
// request_undecryptable) and nothing else is disturbed.
//
// # Answers
//
// The decrypted body names the handler path in "endpoint" (default
// /v1/chat/completions; only clean /v1/... paths), which is removed
// before the body reaches the handler. inference_accepted goes out
// first. An event-stream answer is cut into SSE events as the handler
// writes them, and each event becomes one chunk the moment it is
// complete, without its terminating blank line, which is how the
// reference coordinator expects chunks: it writes each chunk followed by
// a blank line and, after inference_complete, its own "data: [DONE]". The
// handler's [DONE] is therefore not forwarded, and the chunks, framed
// that way, are byte for byte what the handler writes over plain HTTP
// (the reference coordinator may still rewrite null fields of a chunk
// before relaying it). Any other 2xx answer is one chunk, the body as
// written.
//
// inference_complete carries the usage of the answer (the stream's usage
// chunk or the body's usage; a stream without one reports the number of
// chunks that carried text as completion tokens and no prompt tokens) and
// response_hash, the reference's: hex SHA-256 of "<request id>:<completion
// tokens>:<text>", where text is the body of a whole answer, or the
// streamed content and reasoning deltas (and completion text) in order.
//
// A non-2xx answer becomes inference_error with its status and the error
// body's code (else its type, else the status text). An error event in a
// stream that had started becomes inference_error with the status its
// error type implies; it is not forwarded, since the coordinator writes
// its own error event.
//
// A cancel ends the request's context, which is the handler's request
// context: the engine frees the row. The request then sends nothing more.
// A cancel for a request not in flight is ignored: the coordinator sends
// one after every request.
//
// # Attestation
//
// The provider keeps two software keys in the key directory (see
// [LoadKeys]). register carries a blob naming the machine and both
// public keys, signed with the P-256 key (DER ECDSA over the SHA-256 of
// the blob's bytes as sent); it claims no Secure Enclave, SIP, Secure
// Boot or hypervisor, so the coordinator does not count it as hardware
// attestation, but takes from it the key that checks challenges. An
// attestation_challenge is answered with the nonce, public_key (the
// X25519 key, as register gave it), the DER ECDSA signature over
// SHA-256(nonce + timestamp), both strings exactly as received, and the
// posture known here: sip_enabled and hypervisor_active false,
// rdma_disabled from /sys/class/infiniband on Linux (absent elsewhere),
// the executable's hash and the models' weight hashes.
//
// # Connection
//
// The link pings every 10 s and ends the connection when a pong takes
// more than 30 s. It redials at once after losing a connection that was
// registered for at least one heartbeat interval; after a failed dial or
// a shorter connection it waits 1 s, doubling up to 30 s. A message over
// 32 MiB is read to its end and discarded, with a log, and the connection
// survives: nothing of it was held, and the next message is read as
// usual (a request that was in it is never answered; the coordinator
// times it out).
//
// Requests do not outlive their connection. When the connection is lost,
// every request in flight on it is cancelled, freeing its engine rows:
// the reference coordinator has already failed them ("provider
// disconnected", 502) and forgets their ids, so nothing sent for them on
// a new connection would reach anyone. Each is then reported on the next
// connection once it is registered, as inference_error 502
// connection_lost, so that the link's accounting is closed for every
// request: none of them is counted as served, and each still has exactly
// one end on the wire, whichever connection carries it. Load
// statuses that finish between connections wait for the next one in the
// same way.
//
// # Invariants
//
//   - register is the first message of every connection, the first
//     heartbeat the second; the heartbeat and ping timers are armed
//     before register is written.
//   - Every accepted request ends exactly once: inference_complete or
//     inference_error on its own connection, connection_lost on a later
//     one, or a cancel from the coordinator, after which it sends
//     nothing.
//   - A request's chunks are sent in the order the handler wrote them,
//     only on the connection it arrived on, and only sealed.
//   - Nothing a coordinator message contains ends the connection.
//   - Logs carry ids, sizes, counts, statuses and reasons; never a
//     request or response body, nor key material.
//
// # Imports
//
// link imports slots for the capacity snapshot and nothing else of the
// provider: the server reaches it only as an http.Handler, the models
// only through the Options functions.
package link
