// Package link is the session layer between a controller and a detached kernel
// (docs/protocol.md, "Protocol 2"): a handshake with a token and an epoch, then envelopes
// carrying protocol 1 frames with seq and cumulative ack, an outbox on each side resent
// after every handshake, and a receiver that applies each seq at most once.
//
// The pieces are usable alone: Envelope and Decode are the wire codec; Outbox and Inbox
// are each side's bookkeeping (the kernel's outbox bounds and drop rule included, so a
// test kernel in Go keeps the same rules as the stub's kennel/_link.py); Client is the
// controller's side of one kernel's link: it dials through a Dialer, reattaches with
// backoff when the connection drops, and presents the kernel's frames as the byte
// streams a transports.Kernel has, so the controller above it reads protocol 1 lines
// exactly as over stdio.
package link
