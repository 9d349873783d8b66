# Convenience targets; ./dev is the source of truth.
.PHONY: build up test bench fuzz fmt vet

build:
	./dev build

up:
	./dev up

test:
	./dev test

bench:
	go test -run '^$$' -bench . -benchtime 3x ./internal/client/

fuzz:
	./dev fuzz 30s

fmt:
	gofmt -w $$(git ls-files '*.go')

vet:
	go vet ./...
