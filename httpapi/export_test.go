package httpapi

// RaceEnabled exports raceEnabled to the external tests (package
// httpapi_test).
const RaceEnabled = raceEnabled
