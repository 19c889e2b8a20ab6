package app

// relayRaceBuild reports whether this test binary has the race detector
// (relay_race_test.go sets it); the binaries the tests build then have it
// too.
var relayRaceBuild bool
