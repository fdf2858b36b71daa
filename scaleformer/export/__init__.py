"""A trained model outside the framework.

- ``folder``: the exported ``model/`` folder (Hugging Face files, the method record ``scaleformer.json``);
- ``card``: its model card; ``hub``: fetching by Hub id and the opt-in push;
- ``summarizer``: ``Summarizer.from_pretrained(folder or hub id)(text) -> summary``.
"""
