# The two set-up commands of the README are `go run ./cmd/kennel run ...` and `make test`.
GO ?= go

.PHONY: test build vet fmt bench

# test installs what the tests need (root: apt packages, the kernel image), then runs every
# test with the race detector. .ci/run calls exactly this.
test:
	bash .ci/install
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 30m ./...

build:
	$(GO) build -o kennel ./cmd/kennel

bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 6 ./... | tee bench.out
