// Package layering holds no code: its test keeps the direction of
// dependencies between pqwatch's packages (CONTRIBUTING.md draws it).
package layering
