//! Placeholder: joint estimation is being written.
