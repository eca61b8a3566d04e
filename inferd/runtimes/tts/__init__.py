"""Text to speech runtimes (speakers): Piper/VITS voices on onnxruntime (piper.py),
phonemised by espeak-ng through ctypes (espeak.py). A leaf: imports nothing above
inferd.runtimes. Importing the package loads nothing native: voice.py reads configs only."""
