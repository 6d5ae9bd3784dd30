"""One prompt -> one video on any layout: ``spec`` (the request and its rules), ``layouts``
(a spec as its layout's plan, run by ``ppdit.parallel``), ``generate`` (check, encode, noise,
denoise, decode: ``WanPipeline.__call__``'s order)."""
