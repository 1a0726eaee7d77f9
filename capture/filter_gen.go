package capture

// The socket filter (bpf/filter.c) compiled into filter_bpfel.o with its Go
// bindings (filter_bpfel.go), both committed: building pqwatch needs no
// clang. Regenerate after changing the C: go generate ./capture (Debian
// clang, llvm, libbpf-dev); TestFilterObjectCurrent checks they are current.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -tags linux filter bpf/filter.c
