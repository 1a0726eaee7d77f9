//go:build race

package main

// raceEnabled: the test binary was built with -race.
const raceEnabled = true
