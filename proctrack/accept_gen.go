package proctrack

// The accept program (bpf/accept.c) compiled into accept_bpfel.o with its Go
// bindings (accept_bpfel.go), both committed: building pqwatch needs no clang.
// Regenerate after changing the C: go generate ./proctrack (Debian clang,
// llvm, libbpf-dev).
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type event -tags linux accept bpf/accept.c
