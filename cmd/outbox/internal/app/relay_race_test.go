//go:build race

package app

func init() { relayRaceBuild = true }
