package scripts

// The scripts of package waitgroup. Their contracts are in the headers of the .lua files;
// lib/waitgroup.lua holds the state they share.
var (
	WaitGroupAdd   = load("waitgroup_add.lua")
	WaitGroupJoin  = load("waitgroup_join.lua")
	WaitGroupLeave = load("waitgroup_leave.lua")
	WaitGroupVoid  = load("waitgroup_void.lua")
	WaitGroupCheck = load("waitgroup_check.lua")
)
