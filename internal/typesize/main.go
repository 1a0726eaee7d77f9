// Command typesize lists the largest types (-n, 10 by default; 0: all) of
// a Go package directory: for
// each named struct type declared in its non-test files, the number of
// its fields (an embedded field counts one; a name list "a, b T" counts
// two), of the methods declared on it (value or pointer receiver), and of
// its fields whose type is sync.Mutex or sync.RWMutex (its own, not those
// of the types it holds). Largest first by fields + methods.
//
//	go run ./internal/typesize ./proctrack
//	go run ./internal/typesize -n 0 ./proctrack
package main

import (
	"cmp"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

type size struct {
	name                     string
	fields, methods, mutexes int
	files                    map[string]bool
}

func main() {
	top := flag.Int("n", 10, "how many types to list, largest first (0: all)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: typesize [-n N] DIR (a Go package directory, e.g. ./proctrack)")
		os.Exit(2)
	}
	dir := flag.Arg(0)
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(names) == 0 {
		fmt.Fprintf(os.Stderr, "typesize: no Go files in %s: give a package directory\n", dir)
		os.Exit(1)
	}
	fset := token.NewFileSet()
	types := map[string]*size{}
	get := func(n string) *size {
		if types[n] == nil {
			types[n] = &size{name: n, files: map[string]bool{}}
		}
		return types[n]
	}
	var structs = map[string]bool{}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			fmt.Fprintf(os.Stderr, "typesize: %v\n", err)
			os.Exit(1)
		}
		base := filepath.Base(name)
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.GenDecl:
				for _, s := range d.Specs {
					ts, ok := s.(*ast.TypeSpec)
					if !ok {
						continue
					}
					st, ok := ts.Type.(*ast.StructType)
					if !ok {
						continue
					}
					structs[ts.Name.Name] = true
					z := get(ts.Name.Name)
					z.files[base] = true
					for _, fl := range st.Fields.List {
						n := max(1, len(fl.Names))
						z.fields += n
						if sel, ok := fl.Type.(*ast.SelectorExpr); ok {
							if x, ok := sel.X.(*ast.Ident); ok && x.Name == "sync" && (sel.Sel.Name == "Mutex" || sel.Sel.Name == "RWMutex") {
								z.mutexes += n
							}
						}
					}
				}
			case *ast.FuncDecl:
				if d.Recv == nil || len(d.Recv.List) == 0 {
					continue
				}
				t := d.Recv.List[0].Type
				if s, ok := t.(*ast.StarExpr); ok {
					t = s.X
				}
				if ix, ok := t.(*ast.IndexExpr); ok {
					t = ix.X
				}
				if id, ok := t.(*ast.Ident); ok {
					z := get(id.Name)
					z.methods++
					z.files[base] = true
				}
			}
		}
	}
	var out []*size
	for n, z := range types {
		if structs[n] {
			out = append(out, z)
		}
	}
	slices.SortFunc(out, func(a, b *size) int {
		return cmp.Or(cmp.Compare(b.fields+b.methods, a.fields+a.methods), cmp.Compare(a.name, b.name))
	})
	fmt.Printf("%-20s %6s %7s %7s  %s\n", "type", "fields", "methods", "mutexes", "files")
	for i, z := range out {
		if i == *top && *top > 0 {
			break
		}
		files := slices.Sorted(maps.Keys(z.files))
		fmt.Printf("%-20s %6d %7d %7d  %s\n", z.name, z.fields, z.methods, z.mutexes, strings.Join(files, " "))
	}
}
