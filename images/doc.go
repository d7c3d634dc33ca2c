// Package images holds the kernel stub, the standard-library Python program that runs
// inside every sandbox, and gets it to an interpreter.
//
// The stub (images/kernel/kennel, Python 3.9+) speaks the kernel protocol of
// docs/protocol.md on its stdin and stdout. It is embedded in the binary; Stub returns
// it as a Bundle, whose Hash names its content. A kernel runs it either unpacked into a
// private cache directory (Unpack, KernelArgv) or streamed over stdin into memory
// (BootstrapArgv, BootstrapPayload), for sandboxes whose files kennel cannot write
// ahead of time. ResolvePython turns "python3" into the real interpreter's absolute
// path once, so no kernel start pays for a shim; PythonCache keeps that answer on disk
// for the next process, checked against the identity of the files it came from.
//
// Starting a local kernel:
//
//	b, err := images.Stub()
//	if err != nil { ... }
//	cache, err := images.DefaultCacheDir()
//	if err != nil { ... }
//	dir, err := b.Unpack(cache)
//	if err != nil { ... }
//	python, err := images.ResolvePython(ctx, "python3")
//	if err != nil { ... } // errors.Is(err, images.ErrNoPython)
//	argv := images.KernelArgv(python, dir)
//	cmd := exec.Command(argv[0], argv[1:]...)
//	cmd.Env = append(os.Environ(), images.KernelEnv(b)...)
//	// cmd's stdin and stdout now carry frames; the first frame is the hello.
//
// The stub's own environment knobs are the Env* constants.
package images
