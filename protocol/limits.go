package protocol

// The limits of protocol version 1 (docs/protocol.md, "Limits").
const (
	// Version is the protocol version a kernel announces in its hello frame.
	Version = 1

	// MaxLine is the largest frame, in bytes, including its newline. The host's gate
	// refuses or drops a longer line without buffering it past this size.
	MaxLine = 32 << 20

	// HeadSize is how many bytes of a line the gate reads to decide on it: the line's
	// event, id and (for a host request) type must lie within it.
	HeadSize = 4 << 10

	// IDsKept is how many of the newest host-request ids the gate remembers to refuse a
	// duplicate.
	IDsKept = 1024

	// MaxPayload is the largest display or host_request payload the kernel writes; it
	// fails the cell with PayloadTooLarge instead of writing a bigger one.
	MaxPayload = 16 << 20
)
