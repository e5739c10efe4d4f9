//go:build race

package main

// raceBuild is whether this test binary has the race detector: the distsync binary the tests
// run is built the same way, so that go build finds every package it needs compiled already,
// in the build cache, for the test binary.
const raceBuild = true
