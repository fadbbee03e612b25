//! `haptic-sandbox demo`: pushes the render corpus to every pod over real HTTP (being built).
