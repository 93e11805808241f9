"""Files in and out: image and stack readers, landmark files, galleries."""
