package images

// Environment entries the stub reads. A transport sets them in the kernel's
// environment; KernelEnv gives the ones that depend on the bundle.
const (
	// EnvBundle carries the bundle hash the stub reports in its hello ("" when unset or
	// not 64 lowercase hex digits).
	EnvBundle = "KENNEL_KERNEL_BUNDLE"
	// EnvOwnerPID names a pid the kernel watches every 0.5 s; the kernel ends when it
	// dies (or, when it was the kernel's parent, when the kernel is reparented).
	EnvOwnerPID = "KENNEL_KERNEL_OWNER_PID"
	// EnvOwner set to "stdin" makes the kernel watch stdin alone, even if EnvOwnerPID
	// is set.
	EnvOwner = "KENNEL_KERNEL_OWNER"
	// EnvEOFGrace is how many seconds (a decimal number) a cell that holds the kernel
	// after its graceful end began (stdin EOF, shutdown, owner death) may run before the
	// process exits anyway. Default 30. SIGTERM waits for no cell: it ends the kernel
	// (its jobs TERMed, then KILLed after 1 s) and exits 143 whatever end is under way.
	EnvEOFGrace = "KENNEL_KERNEL_EOF_GRACE"
	// EnvSite set to "0" keeps site-packages off the kernel's sys.path. By default the
	// stub runs site.main() after its hello, so cells can import installed packages
	// (and a venv's) although the interpreter starts with -S.
	EnvSite = "KENNEL_KERNEL_SITE"
	// EnvMemory caps the kernel's resident memory in bytes (a sampled guard: a running
	// cell past it is interrupted with reason memory; docs/protocol.md, "The memory
	// cap"). Default 256 MiB; 0 or less: no cap. The controller sets it for every kernel.
	EnvMemory = "KENNEL_KERNEL_MEMORY_BYTES"
	// EnvRun names a detached kernel's run directory (docs/protocol.md, "Protocol 2"):
	// the stub reads its token from fd 0, serves kernel.sock there and watches no owner.
	EnvRun = "KENNEL_KERNEL_RUN"
	// EnvPooled set to "1" beside EnvRun makes a detached kernel one started ahead of its
	// session (a warm pool): it loads the kernel proper, then reads a start block from
	// fd 0 (its token line, then one JSON line {"dir": ..., "env": [...]}: the working
	// directory and the whole environment the session's kernel runs with) instead of
	// the token alone.
	EnvPooled = "KENNEL_KERNEL_POOLED"
)

// bootProgram is the -c program of KernelArgv: argv[1] is the unpacked bundle dir.
const bootProgram = "import sys;sys.path.insert(0,sys.argv[1]);from kennel._boot import main;main()"

// KernelArgv returns the argv that runs the stub unpacked in dir (see Unpack) with the
// interpreter python (an absolute path, see ResolvePython): isolated mode (-I: no
// PYTHON* variables, no user site, no script dir on sys.path) without site at start
// (-S), with dir put on sys.path explicitly.
func KernelArgv(python, dir string) []string {
	return []string{python, "-I", "-S", "-c", bootProgram, dir}
}

// KernelEnv returns the environment entries ("KEY=VALUE") the stub of b needs: its
// bundle hash, and MALLOC_MMAP_THRESHOLD_ so glibc keeps large frame buffers on the
// heap (large frames are written several times faster). The owner entries are the
// transport's to add.
func KernelEnv(b *Bundle) []string {
	return []string{
		EnvBundle + "=" + b.Hash(),
		"MALLOC_MMAP_THRESHOLD_=33554432",
	}
}
