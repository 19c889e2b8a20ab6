//go:build race

package main

func init() { relayRaceBuild = true }
