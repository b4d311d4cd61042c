//go:build !linux

package main

func raisedCapabilities() string { return "" }
