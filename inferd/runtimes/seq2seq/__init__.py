"""Seq2seq rewriters (T5, FLAN-T5, BART, LMQG, OPUS-MT ...): ONNX exports in the Antfly or
optimum layouts on onnxruntime (onnx_model.py, decoded step by step by decoding.py), and
CTranslate2 folders on ctranslate2.Translator (ct2.py). Native libraries are imported by the
modules that need them, when a model loads."""
