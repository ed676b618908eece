"""Tune's trial table: its model (``model``) and index, drawn (``render``) as a live ipywidgets pane
(``widget``) or as text (``text``).
"""
