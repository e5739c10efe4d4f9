package keys

// Slot is slot, for the external tests of the package.
var Slot = slot
